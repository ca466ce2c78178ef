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
_PendingCalls = dict[tuple[str, int, int], pl.CallLine]  # per thread: the call `Best tuning` is about


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

    def __init__(self, lines: list[tuple[int, pl.LogLine]], kinds: list[Optional[pl.Kind]]) -> None:
        switches: dict[DevKey, tuple[list[int], list[int]]] = {}  # positions, handle numbers
        self._handles: list[_Handle] = []
        current: dict[tuple[str, int, str], int] = {}  # (host, pid, comm pointer) -> handle
        for index, ((_, line), kind) in enumerate(zip(lines, kinds)):
            handle = self._announced(line, kind, current) if kind is not None else None
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

    def _announced(self, line: pl.LogLine, kind: pl.Kind,
                   current: dict[tuple[str, int, str], int]) -> Optional[int]:
        """The handle of the communicator a line announces, if it does."""
        parser, value = kind
        if parser is pl.parse_init:
            h = self._handle(current, (line.host, line.pid, value.comm), value.rank, value.nranks,
                             fresh=value.stage == "START")
            handle = self._handles[h]
            handle.comm_id = handle.comm_id or value.comm_id
            handle.complete = handle.complete or value.stage == "COMPLETE"
            return h
        if parser is pl.parse_comm:
            return self._handle(current, (line.host, line.pid, value.comm), value.rank, value.nranks, fresh=False)
        if parser is pl.parse_call and value.comm is not None:
            return current.get((line.host, line.pid, value.comm))
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
    kinds = [pl.parse_body(line.body) for _, line in lines]
    attribution = _Attribution(lines, kinds)
    processes: dict[tuple[str, int], _Process] = {}
    pending_call: _PendingCalls = {}
    touched: dict[int, RankRecord] = {}
    for index, ((lineno, line), kind) in enumerate(zip(lines, kinds)):
        proc = processes.setdefault((line.host, line.pid), _Process())
        if kind is not None and _process_line(kind, proc):
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
        if kind is not None:
            _rank_line(kind, line, record, pending_call)
    out.versions += [p.nccl_version for p in processes.values() if p.nccl_version]
    for record in touched.values():
        proc = processes.get((record.hostname, record.pid), _Process())
        record.host_id = record.host_id or proc.host_id
        record.nccl_version = record.nccl_version or proc.nccl_version


def _process_line(kind: pl.Kind, proc: _Process) -> bool:
    parser, value = kind
    if parser is pl.parse_version:
        proc.nccl_version = value
    elif parser is pl.parse_hostid:
        proc.host_id = value
    else:
        return False
    return True


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


def _rank_line(kind: pl.Kind, line: pl.LogLine, rec: RankRecord, calls: _PendingCalls) -> None:
    """What one line adds to its rank's record, by its kind (parse_log.parse_body)."""
    parser, value = kind
    if parser is pl.parse_init:
        rec.device = value.cuda_dev if value.cuda_dev is not None else rec.device
        rec.nvml_dev = value.nvml_dev if value.nvml_dev is not None else rec.nvml_dev
        rec.busid = value.busid or rec.busid
        rec.init_complete = rec.init_complete or value.stage == "COMPLETE"
    elif parser is pl.parse_comm:
        rec.nnodes, rec.local_ranks, rec.local_rank = value.nnodes, value.local_ranks, value.local_rank
    elif parser is pl.parse_connection:
        rec.connections.append(value)
    elif parser is pl.parse_ring_order:
        rec.ring_orders[value.channel] = value
    elif parser is pl.parse_ring_link:
        rec.ring_links[value.channel] = value
    elif parser is pl.parse_trees:
        rec.trees.update((t.channel, t) for t in value)
    elif parser is pl.parse_tree_line:
        rec.tree_lines[value.channel] = value
    elif parser is pl.parse_channel_counts:
        rec.channel_counts = value
    elif parser is pl.parse_collnet_devices:
        rec.collnet_devices = value if rec.collnet_devices is None else min(value, rec.collnet_devices)
    elif parser is pl.parse_nvls_support:
        rec.nvls_supported = value
    elif parser is pl.parse_nvls_comm:
        rec.nvls_head = value
    elif parser is pl.parse_nvls_head:
        rec.nvls_heads[value[0]] = value[1]
    elif parser is pl.parse_graph_line:
        rec.graph_lines.append(value)
    elif parser is pl.parse_tuning:
        call = calls.get((line.host, line.pid, line.tid))
        if value.collective is None and call is not None:
            value = dataclasses.replace(value, collective=call.collective)
        rec.tuning.append(value)
    elif parser is pl.parse_call:
        calls[(line.host, line.pid, line.tid)] = value
    elif parser is pl.parse_best_tuning:
        call = calls.pop((line.host, line.pid, line.tid), None)
        if call is not None:
            rec.best_tuning.append((call.collective, call.nbytes, value[0], value[1]))
