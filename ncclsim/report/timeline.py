"""The ranks' modelled timelines (launch --clock model): every NCCL process
writes one Chrome trace event per line, without its "pid", to its rank's
timeline file (rundir.RankFiles.timeline): its kernels on thread 1 + the
stream's index, and with launch --timeline its steps on thread 1000 + the
channel. They are read here for the kernels' times and merged into one trace,
rundir.TIMELINE_JSON, that ui.perfetto.dev and chrome://tracing open: one
process per launched rank (pid = the rank), named after its host and GPU.

A process that was killed may leave half a line at the end: lines that do
not parse are skipped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

from ncclsim.report.summary import rank_ranges
from ncclsim.report.timings import Kernel, kernel_of
from ncclsim.rundir import RunDir

STEP_TID = 1000  # steps: STEP_TID + channel; below it, kernels: 1 + stream index
PROCESS_TIDS = 10000  # a rank's second, third... NCCL process: its threads shifted by this much each


@dataclass(frozen=True)
class TimelineFile:
    rank: int  # the launched rank whose directory holds it
    path: Path
    index: int  # among that rank's files (a rank may start several NCCL processes)

    @property
    def os_pid(self) -> str:
        """The writer's pid, from the file's name (timeline.<pid>.jsonl)."""
        parts = self.path.name.split(".")
        return parts[1] if len(parts) == 3 else "?"


def timeline_files(run: RunDir) -> list[TimelineFile]:
    return [TimelineFile(r, p, i) for r in run.rank_numbers() for i, p in enumerate(run.rank(r).timelines())]


def _events(path: Path, wanted: tuple[str, ...] = ()) -> Iterator[tuple[str, dict[str, Any]]]:
    """(line, event) of every line that parses as an object; with `wanted`,
    only lines containing one of those strings are parsed (steps outnumber
    kernels by far)."""
    try:
        f = path.open(encoding="utf-8", errors="replace")
    except OSError:
        return
    with f:
        for line in f:
            line = line.strip()
            if not line or (wanted and not any(w in line for w in wanted)):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event:
                yield line, event


@dataclass
class Kernels:
    kernels: list[Kernel] = field(default_factory=list)
    truncated: list[int] = field(default_factory=list)  # ranks whose step events stop at the driver's cap


def read_kernels(files: list[TimelineFile]) -> Kernels:
    out = Kernels()
    for f in files:
        for _, event in _events(f.path, ('"kernel"', '"note"')):
            k = kernel_of(event, str(f.path))
            if k is not None:
                out.kernels.append(k)
            elif event.get("cat") == "note" and "truncated" in str(event.get("name")):
                out.truncated.append(f.rank)
    return out


def launched_hosts(launch: Optional[Mapping[str, Any]]) -> dict[int, int]:
    """Launched rank -> simulated host, from launch.json."""
    hosts = {}
    for r in (launch or {}).get("ranks") or []:
        if isinstance(r, dict) and isinstance(r.get("rank"), int) and isinstance(r.get("host"), int):
            hosts[r["rank"]] = r["host"]
    return hosts


@dataclass
class _Seen:
    """What the metadata events name: each rank's GPUs and each thread's stream."""
    devices: dict[int, set[int]] = field(default_factory=dict)
    threads: dict[tuple[int, int], str] = field(default_factory=dict)

    def event(self, f: TimelineFile, tid: int, event: dict[str, Any]) -> None:
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        if isinstance(args.get("device"), int):
            self.devices.setdefault(f.rank, set()).add(args["device"])
        key = (f.rank, tid + f.index * PROCESS_TIDS)
        if key in self.threads or tid <= 0:
            return
        name = f"channel {tid - STEP_TID}" if tid >= STEP_TID else f"stream {tid}"
        if tid < STEP_TID and args.get("stream"):
            name += f" ({args['stream']})"
        self.threads[key] = name + (f", pid {f.os_pid}" if f.index else "")

    def metadata(self, hosts: Mapping[int, int]) -> Iterator[dict[str, Any]]:
        for rank in sorted({r for r, _ in self.threads} | set(self.devices)):
            where = [f"host {hosts[rank]}"] if rank in hosts else []
            gpus = sorted(self.devices.get(rank, ()))
            if gpus:
                where.append(f"GPU{'s' if len(gpus) > 1 else ''} {rank_ranges(gpus)}")
            name = f"rank {rank}" + (f" ({', '.join(where)})" if where else "")
            yield {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": name}}
            yield {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}}
        for (rank, tid), name in sorted(self.threads.items()):
            yield {"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": name}}


def write_trace(files: list[TimelineFile], dest: Path, hosts: Mapping[int, int]) -> int:
    """Every event of `files` into one trace at `dest` (written whole, then
    renamed: a viewer never opens half of one); returns the events written."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
    seen = _Seen()
    written = 0
    try:
        with tmp.open("w", encoding="utf-8") as out:
            out.write('{"displayTimeUnit": "ns", "traceEvents": [\n')
            for f in files:
                for line, event in _events(f.path):
                    tid = event.get("tid", 0)
                    tid = tid if isinstance(tid, int) else 0
                    seen.event(f, tid, event)
                    if f.index or "pid" in event:
                        text = json.dumps({**event, "pid": f.rank, "tid": tid + f.index * PROCESS_TIDS})
                    else:  # the line as written, with its pid in front: no re-encoding of many steps
                        text = f'{{"pid": {f.rank}, {line[1:]}'
                    out.write((",\n" if written else "") + text)
                    written += 1
            for meta in seen.metadata(hosts):
                out.write((",\n" if written else "") + json.dumps(meta))
            out.write("\n]}\n")
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return written
