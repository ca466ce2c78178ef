"""Reading NCCL logs into per-rank records.

A log line names its process and device (`host:pid:tid [dev]`) but usually not
its communicator or rank. NCCL names those at `Init START` and in the
`comm 0x.. rank r nRanks n` line, so each (host, pid, device) follows the
communicator it last announced; lines before any announcement belong to the
first one that comes later (a process logs its plugin set-up before it knows
its rank). Communicators are told apart by commId, so one log may hold several.
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from ncclsim.report import parse_log as pl

ERROR_LEVELS = ("WARN", "ERROR", "ABORT")

DevKey = tuple[str, int, Optional[int]]  # hostname, pid, device


@dataclass(frozen=True)
class CommIdentity:
    key: str  # commId, or `nranks=N` for releases that do not log one
    rank: int
    nranks: int


@dataclass(eq=False)  # records are compared by identity: they are filled in place
class RankRecord:
    """One rank of one communicator, as its log tells it."""
    identity: CommIdentity
    log: str
    hostname: str
    pid: int
    device: Optional[int]
    host_id: Optional[str] = None
    nccl_version: Optional[str] = None  # what the rank's process loaded, as it logs it
    nvml_dev: Optional[int] = None
    busid: Optional[str] = None
    nnodes: Optional[int] = None
    local_ranks: Optional[int] = None
    local_rank: Optional[int] = None
    init_complete: bool = False
    ring_links: dict[int, pl.RingLink] = field(default_factory=dict)
    ring_orders: dict[int, pl.RingOrder] = field(default_factory=dict)
    trees: dict[int, pl.TreeLink] = field(default_factory=dict)  # from `Trees [c] ..`
    tree_lines: dict[int, pl.TreeLink] = field(default_factory=dict)  # from `Tree c : ..`
    connections: list[pl.ConnLine] = field(default_factory=list)
    channel_counts: dict[str, int] = field(default_factory=dict)
    collnet_devices: Optional[int] = None
    nvls_supported: Optional[bool] = None
    nvls_head: Optional[tuple[int, int]] = None  # (head index or -1, heads) from `NVLS comm`
    nvls_heads: dict[int, tuple[int, ...]] = field(default_factory=dict)  # `NVLS Head h: ranks`
    graph_lines: list[pl.GraphLine] = field(default_factory=list)
    tuning: list[pl.TuningLine] = field(default_factory=list)
    best_tuning: list[tuple[str, Optional[int], str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class LoggedError:
    log: str
    line: int
    level: str
    message: str
    source: Optional[str]
    identity: Optional[CommIdentity]


@dataclass
class Collected:
    ranks: dict[tuple[str, int], RankRecord] = field(default_factory=dict)  # (comm key, rank)
    comm_order: list[str] = field(default_factory=list)  # comm keys as first seen
    errors: list[LoggedError] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)  # one per process, also those that never got a rank


@dataclass
class _Process:
    """What a process says once for all its ranks."""
    host_id: Optional[str] = None
    nccl_version: Optional[str] = None


@dataclass
class _Handle:
    """One communicator as one process knows it, until its commId is known:
    releases before 2.18 print the commId only at `Init COMPLETE`, after most lines."""
    rank: int
    nranks: int
    comm_id: Optional[str] = None
    complete: bool = False


class _Attribution:
    """Which communicator/rank each line of one log belongs to."""

    def __init__(self, lines: list[tuple[int, pl.LogLine]]) -> None:
        switches: dict[DevKey, tuple[list[int], list[int]]] = {}  # positions, handle numbers
        self._handles: list[_Handle] = []
        current: dict[tuple[str, int, str], int] = {}  # (host, pid, comm pointer) -> handle
        for index, (_, line) in enumerate(lines):
            handle = self._announced(line, current)
            if handle is not None:
                pos, hs = switches.setdefault((line.host, line.pid, line.dev), ([], []))
                pos.append(index)
                hs.append(handle)
        idents = [CommIdentity(h.comm_id or f"nranks={h.nranks}", h.rank, h.nranks) for h in self._handles]
        self._switches = {k: (pos, [idents[h] for h in hs]) for k, (pos, hs) in switches.items()}
        self._per_process: dict[tuple[str, int], set[CommIdentity]] = {}
        for (host, pid, _), (_, ids) in self._switches.items():
            self._per_process.setdefault((host, pid), set()).update(ids)

    def _handle(self, current: dict[tuple[str, int, str], int], key: tuple[str, int, str],
                rank: int, nranks: int, fresh: bool) -> int:
        """The handle of a comm pointer; a new one when the pointer now means another
        communicator (a destroyed comm's memory reused, or a different rank)."""
        h = current.get(key)
        if h is None or self._handles[h].rank != rank or (fresh and self._handles[h].complete):
            self._handles.append(_Handle(rank, nranks))
            h = current[key] = len(self._handles) - 1
        return h

    def _announced(self, line: pl.LogLine, current: dict[tuple[str, int, str], int]) -> Optional[int]:
        """The handle of the communicator a line announces, if it does."""
        init = pl.parse_init(line.body)
        if init is not None:
            h = self._handle(current, (line.host, line.pid, init.comm), init.rank, init.nranks,
                             fresh=init.stage == "START")
            handle = self._handles[h]
            handle.comm_id = handle.comm_id or init.comm_id
            handle.complete = handle.complete or init.stage == "COMPLETE"
            return h
        comm = pl.parse_comm(line.body)
        if comm is not None:
            return self._handle(current, (line.host, line.pid, comm.comm), comm.rank, comm.nranks, fresh=False)
        call = pl.parse_call(line.body)
        if call is not None and call.comm is not None:
            return current.get((line.host, line.pid, call.comm))
        return None

    def identity(self, index: int, line: pl.LogLine) -> Optional[CommIdentity]:
        found = self._switches.get((line.host, line.pid, line.dev))
        if found is None:
            # A line without a device of its own (or a device that never initialised
            # a communicator): only unambiguous within its process.
            same_process = self._per_process.get((line.host, line.pid), set())
            return next(iter(same_process)) if len(same_process) == 1 else None
        positions, ids = found
        at = bisect.bisect_right(positions, index) - 1
        return ids[max(at, 0)]


def read_log_lines(path: Path) -> list[tuple[int, pl.LogLine]]:
    with path.open("r", encoding="utf-8", errors="replace") as f:
        return [(n, parsed) for n, text in enumerate(f, 1) if (parsed := pl.parse_line(text)) is not None]


def collect(logs: Iterable[tuple[str, list[tuple[int, pl.LogLine]]]]) -> Collected:
    """Sorts (name-in-report, parsed lines) of each log into per-rank records."""
    out = Collected()
    for name, lines in logs:
        _collect_file(lines, name, out)
    return out


def _collect_file(lines: list[tuple[int, pl.LogLine]], name: str, out: Collected) -> None:
    attribution = _Attribution(lines)
    processes: dict[tuple[str, int], _Process] = {}
    pending_call: dict[tuple[str, int, int], pl.CallLine] = {}  # per thread: the call `Best tuning` is about
    touched: dict[int, RankRecord] = {}
    for index, (lineno, line) in enumerate(lines):
        proc = processes.setdefault((line.host, line.pid), _Process())
        if _process_line(line.body, proc):
            continue
        ident = attribution.identity(index, line)
        if line.level in ERROR_LEVELS:
            out.errors.append(LoggedError(name, lineno, line.level, line.body, line.source, ident))
            continue
        if ident is None or line.level != "INFO":
            continue
        record = _record(out, ident, name, line)
        if record is None:
            continue
        touched[id(record)] = record
        _rank_line(line, record, pending_call)
    out.versions += [p.nccl_version for p in processes.values() if p.nccl_version]
    for record in touched.values():
        proc = processes.get((record.hostname, record.pid), _Process())
        record.host_id = record.host_id or proc.host_id
        record.nccl_version = record.nccl_version or proc.nccl_version


def _process_line(body: str, proc: _Process) -> bool:
    version = pl.parse_version(body)
    if version is not None:
        proc.nccl_version = version
        return True
    host_id = pl.parse_hostid(body)
    if host_id is not None:
        proc.host_id = host_id
        return True
    return False


def _record(out: Collected, ident: CommIdentity, name: str, line: pl.LogLine) -> Optional[RankRecord]:
    key = (ident.key, ident.rank)
    record = out.ranks.get(key)
    if record is None:
        record = RankRecord(ident, name, line.host, line.pid, line.dev)
        out.ranks[key] = record
        if ident.key not in out.comm_order:
            out.comm_order.append(ident.key)
    elif (record.log, record.pid) != (name, line.pid):
        # The same rank of the same communicator in two processes: two runs in one directory.
        note = f"rank {ident.rank} of communicator {ident.key} appears in {record.log} and {name}; using {record.log}"
        if note not in out.duplicates:
            out.duplicates.append(note)
        return None
    return record


def _rank_line(line: pl.LogLine, rec: RankRecord,
               pending_call: dict[tuple[str, int, int], pl.CallLine]) -> None:
    body = line.body
    if (init := pl.parse_init(body)) is not None:
        rec.device = init.cuda_dev if init.cuda_dev is not None else rec.device
        rec.nvml_dev = init.nvml_dev if init.nvml_dev is not None else rec.nvml_dev
        rec.busid = init.busid or rec.busid
        rec.init_complete = rec.init_complete or init.stage == "COMPLETE"
    elif (comm := pl.parse_comm(body)) is not None:
        rec.nnodes, rec.local_ranks, rec.local_rank = comm.nnodes, comm.local_ranks, comm.local_rank
    elif (conn := pl.parse_connection(body)) is not None:
        rec.connections.append(conn)
    elif (order := pl.parse_ring_order(body)) is not None:
        rec.ring_orders[order.channel] = order
    elif (link := pl.parse_ring_link(body)) is not None:
        rec.ring_links[link.channel] = link
    elif trees := pl.parse_trees(body):
        rec.trees.update((t.channel, t) for t in trees)
    elif (tree := pl.parse_tree_line(body)) is not None:
        rec.tree_lines[tree.channel] = tree
    elif (counts := pl.parse_channel_counts(body)) is not None:
        rec.channel_counts = counts
    elif (devices := pl.parse_collnet_devices(body)) is not None:
        rec.collnet_devices = devices if rec.collnet_devices is None else min(devices, rec.collnet_devices)
    elif (nvls := pl.parse_nvls_support(body)) is not None:
        rec.nvls_supported = nvls
    elif (nvls_comm := pl.parse_nvls_comm(body)) is not None:
        rec.nvls_head = nvls_comm
    elif (head := pl.parse_nvls_head(body)) is not None:
        rec.nvls_heads[head[0]] = head[1]
    elif (graph := pl.parse_graph_line(body)) is not None:
        rec.graph_lines.append(graph)
    elif (tuning := pl.parse_tuning(body)) is not None:
        call = pending_call.get((line.host, line.pid, line.tid))
        if tuning.collective is None and call is not None:
            tuning = dataclasses.replace(tuning, collective=call.collective)
        rec.tuning.append(tuning)
    elif (call := pl.parse_call(body)) is not None:
        pending_call[(line.host, line.pid, line.tid)] = call
    elif (best := pl.parse_best_tuning(body)) is not None:
        call = pending_call.pop((line.host, line.pid, line.tid), None)
        if call is not None:
            rec.best_tuning.append((call.collective, call.nbytes, best[0], best[1]))
