#!/usr/bin/env python3
"""Speed and scale of the emulation: the figures of the speed-and-scale work,
for one or more ncclsim installations on the same machine in one run.

    python benchmarks/speed_scale.py [--ncclsim LABEL=PATH ...] [--figures small,large,perf,scale,nccl-tests]
                                     [--scale 8,32,64,128] [--all-reduce-perf PATH] [--repeat N] [--json out.json]

Each `--ncclsim` names a `ncclsim` console script (default: `now=` the one
beside this interpreter); give an older installation too (a venv with an
earlier commit installed, see benchmarks/README.md) to measure before and
after. Every figure runs each installation in turn, so both see the same
machine state. Figures:

* small: the probe's AllReduce of 8 B, 300 operations enqueued back to back
  then synchronised: milliseconds per operation on 1 x 2, 2 x 1, 1 x 8,
  2 x 8 and 8 x 8 (one process per GPU), and 2 x 8 and 8 x 8 with a process
  per host;
* large: AllReduce of 128 MiB on 2 x 8, 3 operations (results not checked
  here; the test suite checks them): seconds per operation, with a process
  per GPU and with a process per host (`--gpus-per-process 8`);
* perf: nccl_perf (tests/programs/nccl_perf.cu, all_reduce_perf's sweep)
  2 x 8, 8 B to 128 MiB, `-c 1` (every result checked): wall seconds;
* nccl-tests: NVIDIA's all_reduce_perf (built with MPI=1, given by
  `--all-reduce-perf`) 2 x 8, 8 B to 128 MiB by 2, `-c 1`: wall seconds and
  its own time per size (its checks run as kernels of its own, which the
  simulated GPU does not compute: it reports no wrong values whatever NCCL
  did; nccl_perf above checks on the CPU);
* scale: `launch --hosts N --gpus 8` with the default probe for each N of
  `--scale`: wall seconds, whether every rank initialised, and the memory the
  machine had in use at the peak (MemTotal - MemAvailable, sampled every
  0.5 s, less what was in use before).

The probe's times are its own (`--json`); wall times are the whole command.
The machine's speed (common.cpu_loop_s) is printed before and after: on a
shared virtual machine it drifts, and so does every figure with it. Beside
each small and large figure, the CPU time all processes spent per operation
(the probe's `cpu_seconds`): the work the simulation did, which the
machine's idle time leaves out (it still drifts with the machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ncclsim.meminfo import meminfo  # the interpreter's ncclsim

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_loop_s, machine, table, write_json  # noqa: E402

Log = Callable[[str], None]
Figure = tuple[list[str], list[list[Any]], list[dict]]

SMALL_SHAPES = [(1, 2, 1), (2, 1, 1), (1, 8, 1), (2, 8, 1), (8, 8, 1), (2, 8, 8), (8, 8, 8)]  # hosts, GPUs, per process
SMALL_ITERS = 300
LARGE_ITERS = 3


def meminfo_used() -> int:
    """Bytes in use on the machine: MemTotal - MemAvailable."""
    m = meminfo()
    return m["MemTotal"] - m["MemAvailable"]


class PeakMemory:
    """The highest MemTotal - MemAvailable while it runs, less the start's."""

    def __init__(self) -> None:
        self.base = meminfo_used()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, meminfo_used())

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def used(self) -> int:
        return self.peak - self.base


def launch(exe: str, hosts: int, gpus: int, command: list[str], extra: tuple[str, ...] | list[str] = (),
           timeout: float = 1800) -> dict[str, Any]:
    """One `ncclsim launch`; its wall time, exit status and (with the probe's
    --json) the probe's result."""
    with tempfile.TemporaryDirectory(prefix="ncclsim-speed-") as tmp:
        out = Path(tmp) / "probe.json"
        cmd = [exe, "launch", "--hosts", str(hosts), "--gpus", str(gpus), "--run-dir", str(Path(tmp) / "run"), *extra]
        if command:  # else launch's default probe
            cmd += ["--", *[c.replace("{json}", str(out)) for c in command]]
        t = time.monotonic()
        with PeakMemory() as mem:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        wall = time.monotonic() - t
        result = json.loads(out.read_text()) if out.exists() else None
        last = (p.stderr.strip().splitlines() or [""])[-1]
        return {"rc": p.returncode, "wall_s": wall, "probe": result, "summary": last, "memory_bytes": mem.used}


def probe(python: str, ops: str, sizes: str, iters: int, warmup: int, check: bool) -> list[str]:
    cmd = [python, "-m", "ncclsim.probe", "--ops", ops, "--sizes", sizes, "--iters", str(iters),
           "--warmup", str(warmup), "--json", "{json}"]
    return cmd + ([] if check else ["--no-check"])


def per_op(r: dict[str, Any], iters: int, key: str = "seconds") -> Optional[float]:
    """The probe's seconds (or CPU seconds, `key` "cpu_seconds") per
    operation; None when the run failed or (CPU seconds before the probe
    measured them) the probe did not say."""
    if r["rc"] != 0 or not r["probe"] or key not in r["probe"]["operations"][0]:
        return None
    return r["probe"]["operations"][0][key] / iters


def fmt(v: Optional[float], scale: float = 1.0, digits: int = 2) -> str:
    return "failed" if v is None else f"{v * scale:.{digits}f}"


def interpreter_of(exe: str) -> str:
    """The Python of the environment `exe` belongs to (the probe runs there)."""
    return str(Path(exe).parent / "python")


Values = dict[str, list[Optional[float]]]


def in_turn(installs: dict[str, str], repeat: int, log: Log, name: str, iters: int,
            run: Callable[[str], dict[str, Any]], raw: list[dict], **record: Any) -> tuple[Values, Values]:
    """`run(exe)` for each installation in turn, `repeat` times (so that each
    sees the machine's drift alike): its seconds and CPU seconds per
    operation by label; every result also goes to `raw` with `record`."""
    values: Values = {label: [] for label in installs}
    cpu: Values = {label: [] for label in installs}
    for rep in range(repeat):
        for label, exe in installs.items():
            log(f"{name}: {label} ({rep + 1}/{repeat})")
            r = run(exe)
            raw.append({**record, "install": label, **r})
            values[label].append(per_op(r, iters))
            cpu[label].append(per_op(r, iters, "cpu_seconds"))
    return values, cpu


def cells(values: Values, scale: float = 1.0, missing: str = "failed") -> list[str]:
    """Each installation's median, with the range when measured more than
    once; `missing` where a value is None."""
    out = []
    for vals in values.values():
        if any(v is None for v in vals):
            out.append(missing)
        elif len(vals) == 1:
            out.append(fmt(vals[0], scale))
        else:
            out.append(f"{fmt(statistics.median(vals), scale)} ({fmt(min(vals), scale)}-{fmt(max(vals), scale)})")
    return out


def small(installs: dict[str, str], repeat: int, log: Log) -> Figure:
    rows: list[list[Any]] = []
    raw: list[dict] = []
    for hosts, gpus, gpp in SMALL_SHAPES:
        name = f"{hosts} x {gpus}" + (", a process per host" if gpp > 1 else "")
        per_process = ["--gpus-per-process", str(gpp)] if gpp > 1 else []  # for launch and the probe

        def run(exe: str) -> dict[str, Any]:
            command = probe(interpreter_of(exe), "allreduce", "8", SMALL_ITERS, 5, True) + per_process
            return launch(exe, hosts, gpus, command, per_process)
        values, cpu = in_turn(installs, repeat, log, f"small {name}", SMALL_ITERS, run, raw,
                              figure="allreduce 8 B", shape=[hosts, gpus], gpus_per_process=gpp)
        rows.append([name, *cells(values, 1e3)])
        rows.append([f"{name}: CPU ms, all processes", *cells(cpu, 1e3, "n/a")])  # n/a: failed or not said
    return ["AllReduce 8 B, ms per operation", *installs], rows, raw


def large(installs: dict[str, str], repeat: int, log: Log) -> Figure:
    rows: list[list[Any]] = []
    raw: list[dict] = []
    for label_proc, extra in (("a process per GPU", []), ("a process per host", ["--gpus-per-process", "8"])):
        def run(exe: str) -> dict[str, Any]:
            # the probe takes --gpus-per-process from launch since 7713139; earlier installations need it given
            command = probe(interpreter_of(exe), "allreduce", "128M", LARGE_ITERS, 1, False) + extra
            return launch(exe, 2, 8, command, extra)
        values, cpu = in_turn(installs, repeat, log, f"large {label_proc}", LARGE_ITERS, run, raw,
                              figure="allreduce 128 MiB", processes=label_proc)
        rows.append([f"2 x 8, {label_proc}", *cells(values)])
        rows.append([f"2 x 8, {label_proc}: CPU s, all processes", *cells(cpu, missing="n/a")])
    return ["AllReduce 128 MiB, s per operation", *installs], rows, raw


def perf(installs: dict[str, str], log: Log) -> Figure:
    from perf_sweep import build  # nvcc; only this figure needs it
    with tempfile.TemporaryDirectory(prefix="ncclsim-perf-") as tmp:
        exe_perf, _ = build(Path(tmp))
        row: list[Any] = ["2 x 8, 8 B to 128 MiB, -c 1"]
        raw = []
        for label, exe in installs.items():
            log(f"perf: {label}")
            r = launch(exe, 2, 8, [str(exe_perf), "-o", "allreduce", "-b", "8", "-e", "128M", "-f", "2", "-c", "1"])
            raw.append({"figure": "nccl_perf", "install": label, **{k: v for k, v in r.items() if k != "probe"}})
            row.append("failed" if r["rc"] else f"{r['wall_s']:.1f}")
    return ["nccl_perf AllReduce sweep, wall s", *installs], [row], raw


def nccl_tests(installs: dict[str, str], all_reduce_perf: Path, log: Log) -> Figure:
    """NVIDIA's all_reduce_perf; libmpi from each installation's environment
    (MPICH's wheel), which the binary was built against."""
    row: list[Any] = ["2 x 8, 8 B to 128 MiB, -c 1"]
    raw = []
    for label, exe in installs.items():
        log(f"nccl-tests: {label}")
        lib = Path(exe).resolve().parent.parent / "lib"
        r = launch(exe, 2, 8, ["sh", "-c", f'LD_LIBRARY_PATH="{lib}:$LD_LIBRARY_PATH" exec "$0" "$@"',
                               str(all_reduce_perf), "-b", "8", "-e", "128M", "-f", "2", "-c", "1", "-g", "1"])
        raw.append({"figure": "all_reduce_perf", "install": label, **{k: v for k, v in r.items() if k != "probe"}})
        row.append("failed" if r["rc"] else f"{r['wall_s']:.1f}")
    return ["nccl-tests all_reduce_perf, wall s", *installs], [row], raw


def scale(installs: dict[str, str], hosts_list: list[int], log: Log) -> Figure:
    rows, raw = [], []
    for hosts in hosts_list:
        row: list[Any] = [f"{hosts} x 8"]
        for label, exe in installs.items():
            log(f"scale: {label} {hosts} x 8")
            r = launch(exe, hosts, 8, [], timeout=3600)
            raw.append({"figure": "launch", "install": label, "hosts": hosts, **r})
            ok = "" if r["rc"] == 0 else f" (exit {r['rc']}: {r['summary']})"
            row.append(f"{r['wall_s']:.1f} s, {r['memory_bytes'] / 1e9:.1f} GB{ok}")
        rows.append(row)
    return ["launch + probe, wall and memory", *installs], rows, raw


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ncclsim", action="append", default=[], metavar="LABEL=PATH",
                    help="an installation's ncclsim script (repeat; default: now=<beside this interpreter>)")
    ap.add_argument("--figures", default="small,large,perf", help="small,large,perf,scale,nccl-tests")
    ap.add_argument("--all-reduce-perf", type=Path, metavar="PATH",
                    help="NVIDIA's all_reduce_perf built with MPI=1 (for the nccl-tests figure; see README)")
    ap.add_argument("--scale", default="8,32,64,128", help="hosts of 8 GPUs for the scale figure")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="small and large: measure each N times, installations in turn; the median (and range)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    bad = [a for a in args.ncclsim if "=" not in a or not Path(a.split("=", 1)[1]).is_file()]
    if bad:
        ap.error(f"--ncclsim wants LABEL=PATH of an ncclsim script: {', '.join(bad)}")
    if args.repeat < 1:
        ap.error(f"--repeat must be 1 or more, got {args.repeat}")
    installs = dict(a.split("=", 1) for a in args.ncclsim) or {"now": str(Path(sys.executable).parent / "ncclsim")}
    known = ("small", "large", "perf", "scale", "nccl-tests")
    unknown = [f for f in args.figures.split(",") if f not in known]
    if unknown:
        ap.error(f"unknown figure(s) {', '.join(unknown)}: choose from {', '.join(known)}")
    if "nccl-tests" in args.figures.split(",") and not (args.all_reduce_perf and args.all_reduce_perf.is_file()):
        ap.error("the nccl-tests figure needs --all-reduce-perf PATH (NVIDIA's all_reduce_perf, built with MPI=1)")
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    figures = args.figures.split(",")
    out: dict[str, Any] = {"machine": machine(), "installs": installs, "runs": []}
    print(f"machine speed at the start: {out['machine']['cpu_loop_s']} s per fixed loop (cpu_loop_s)\n", flush=True)
    for name in figures:
        if name == "scale":
            headers, rows, raw = scale(installs, [int(h) for h in args.scale.split(",")], log)
        elif name == "nccl-tests":
            headers, rows, raw = nccl_tests(installs, args.all_reduce_perf.resolve(), log)
        elif name in ("small", "large"):
            headers, rows, raw = {"small": small, "large": large}[name](installs, args.repeat, log)
        else:
            headers, rows, raw = perf(installs, log)
        out["runs"] += raw
        print(table(headers, rows) + "\n", flush=True)
    out["cpu_loop_s_end"] = cpu_loop_s()
    print(f"machine speed at the end: {out['cpu_loop_s_end']} s per fixed loop", flush=True)
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
