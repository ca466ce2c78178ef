"""From a run directory to a Report: find the logs and dumps, read them, check them."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Optional

from ncclsim import NcclsimError
from ncclsim.report import dumps
from ncclsim.report.dumps import find_dump, output_files, under
from ncclsim.report.exits import exit_check
from ncclsim.report import parse_log as pl
from ncclsim.report.collect import Collected, RankRecord, collect, read_log_lines
from ncclsim.report.model import (Check, CommSummary, Connection, ErrorEntry, Feature, Graph, Nics, Pat, RankInfo,
                                  Report, Topology, Transports, TuningEntry)
from ncclsim.report.structure import build_rings, build_trees
from ncclsim.report.summary import rank_ranges
from ncclsim.report.timeline import launched_hosts, read_kernels, timeline_files, write_trace
from ncclsim.report.timings import timings
from ncclsim.rundir import TIMELINE_JSON, RankFiles, RunDir



def find_logs(run_dir: Path) -> list[tuple[Path, list[tuple[int, pl.LogLine]]]]:
    """The files holding NCCL log lines: `*.log` (NCCL_DEBUG_FILE: one per
    NCCL process), else the ranks' stdout/stderr."""
    found = [(p, lines) for p in under(run_dir, "*.log") if (lines := _read(p))]
    if not found:
        found = [(p, lines) for p in output_files(run_dir) if (lines := _read(p))]
    return found


def _read(path: Path) -> list[tuple[int, pl.LogLine]]:
    try:
        return read_log_lines(path)
    except OSError:
        return []


def _check_run_dir(run_dir: Path) -> None:
    if not run_dir.exists():
        raise NcclsimError(f"run directory {run_dir} does not exist")
    if not run_dir.is_dir():
        raise NcclsimError(f"{run_dir} is not a directory: give the run directory of a simulation")


def build_report(run_dir: Path) -> Report:
    run_dir = Path(run_dir)
    _check_run_dir(run_dir)
    logs = find_logs(run_dir)
    if not logs:
        raise NcclsimError(
            f"no NCCL logs in {run_dir}: expected files such as ranks/<rank>/nccl.<pid>.log with "
            "NCCL INFO lines (run with NCCL_DEBUG=INFO and NCCL_DEBUG_FILE set)")
    names = {p: p.relative_to(run_dir).as_posix() for p, _ in logs}
    collected = collect((names[p], lines) for p, lines in logs)
    notes: list[str] = list(collected.duplicates)
    graphs, topology = _read_dumps(run_dir, notes)
    launch = _read_launch(run_dir, notes)
    exits = {names[p]: _exit_status(p, run_dir) for p, _ in logs}
    report = _assemble(run_dir, collected, graphs, topology, launch, exits, notes, [names[p] for p, _ in logs])
    return _with_timelines(report, run_dir, launch, notes)


def _with_timelines(report: Report, run_dir: Path, launch: Optional[dict[str, Any]], notes: list[str]) -> Report:
    """The modelled kernel times of the ranks' timelines (--clock model), and the clock the run had."""
    files = timeline_files(RunDir(run_dir))
    read = read_kernels(files)
    if read.truncated:
        notes.append(f"timeline: the step events of rank(s) {rank_ranges(read.truncated)} stop where the "
                     "driver's cap was reached (the kernels are all there)")
    options = (launch or {}).get("options")
    clock = options.get("clock", "wall") if isinstance(options, dict) else None
    if isinstance(options, dict) and options.get("no_payload"):
        notes.append("results not checked: launch --no-payload moves no data (NCCL's protocol and the "
                     "modelled time only)")
    return dataclasses.replace(report, clock=clock or ("model" if files else None), timings=timings(read.kernels),
                               timeline=TIMELINE_JSON if files else None, notes=tuple(notes))


def write_run_json(run_dir: Path, report: Optional[Report] = None) -> Path:
    """Writes the report (built here unless given) as `run.json` in the run
    directory, and the ranks' timelines merged as its `timeline` file when it names one."""
    report = report if report is not None else build_report(Path(run_dir))
    run = RunDir(Path(run_dir))
    path = run.run_json
    try:
        path.write_text(json.dumps(report.to_json(), indent=1) + "\n")
        if report.timeline:
            path = run.root / report.timeline
            write_trace(timeline_files(run), path, launched_hosts(report.launch))
    except OSError as e:
        raise NcclsimError(f"cannot write {path}: {e.strerror or e}") from None
    return run.run_json


def _read_dumps(run_dir: Path, notes: list[str]) -> tuple[tuple[Graph, ...], Optional[Topology]]:
    graphs: tuple[Graph, ...] = ()
    topology = None
    graph_path, topo_path = find_dump(run_dir, "graph"), find_dump(run_dir, "topo")
    try:
        if graph_path is not None:
            graphs = dumps.read_graphs(graph_path)
    except NcclsimError as e:
        notes.append(str(e))
    try:
        if topo_path is not None:
            topology = dumps.read_topology(topo_path, topo_path.relative_to(run_dir).as_posix())
    except NcclsimError as e:
        notes.append(str(e))
    return graphs, topology


def _read_launch(run_dir: Path, notes: list[str]) -> Optional[dict[str, Any]]:
    path = RunDir(run_dir).launch_json
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        notes.append(f"{path.name} not readable: {e}")
        return None
    return doc if isinstance(doc, dict) else {"value": doc}


def _exit_status(log: Path, run_dir: Path) -> Optional[int]:
    """The launcher's exit status of the rank whose directory holds the log; a
    log at the top of the run directory belongs to no rank in particular."""
    if log.parent == run_dir:
        return None
    return RankFiles(log.parent).status()


def _primary(collected: Collected) -> Optional[str]:
    """The communicator to report on: the largest, the first of equals."""
    sizes = {key: max(r.identity.nranks for (k, _), r in collected.ranks.items() if k == key)
             for key in collected.comm_order}
    return max(collected.comm_order, key=lambda k: (sizes[k], -collected.comm_order.index(k)), default=None)


def _most_common(values: Iterable[Optional[Any]]) -> Optional[Any]:
    counts = Counter(v for v in values if v is not None)
    return counts.most_common(1)[0][0] if counts else None


def _assemble(run_dir: Path, collected: Collected, graphs: tuple[Graph, ...], topology: Optional[Topology],
              launch: Optional[dict[str, Any]], exits: dict[str, Optional[int]], notes: list[str],
              log_names: list[str]) -> Report:
    primary = _primary(collected)
    records = sorted((r for (k, _), r in collected.ranks.items() if k == primary), key=lambda r: r.identity.rank)
    rank0 = records[0] if records and records[0].identity.rank == 0 else None
    nranks = max((r.identity.nranks for r in records), default=None)
    ranks = tuple(_rank_info(r, exits) for r in records)
    hosts = tuple(dict.fromkeys(r.host for r in ranks if r.host is not None))
    nnodes = _most_common(r.nnodes for r in records)
    checks: list[Check] = _rank_checks(records, nranks)
    ended = exit_check(launch, ranks)
    checks += [ended] if ended else []
    versions = sorted(set(collected.versions))
    if len(versions) > 1:
        checks.append(Check("every process runs the same NCCL", False, ", ".join(versions)))
    host_of = _host_map(ranks, hosts, nnodes, checks)

    rings, ring_checks = build_rings(_by_channel(records, "ring_links"),
                                     rank0.ring_orders if rank0 else {}, nranks)
    trees, tree_checks = build_trees(_by_channel_rank(records, "trees"), _by_channel_rank(records, "tree_lines"),
                                     nranks)
    checks += ring_checks + tree_checks
    connections = _connections(records, host_of)
    nics: Optional[Nics] = None
    if host_of is not None and len(hosts) > 1:
        launched = (launch or {}).get("hosts")
        nhosts = max(len(hosts), launched if isinstance(launched, int) else 0)
        from ncclsim.report.nics import nic_use  # networkx: loaded only for multi-host runs
        nics, nic_check = nic_use(run_dir, nhosts, hosts, ranks, connections, notes)
        checks += [nic_check] if nic_check else []
    if not graphs and rank0 is not None:
        graphs = _graphs_from_log(rank0)
    counts = _channel_counts(records, rank0, checks)
    tuning = _tuning(records)
    return Report(
        run_dir=str(run_dir.resolve()),
        nccl_version=_most_common(collected.versions),
        hosts=hosts, nranks=nranks, nnodes=nnodes if nnodes is not None else (len(hosts) or None),
        local_ranks=rank0.local_ranks if rank0 and rank0.local_ranks else _most_common(r.local_ranks for r in records),
        channels=counts.get("coll"), p2p_channels=counts.get("p2p"),
        rings=rings, trees=trees, connections=connections, transports=_transports(connections),
        nvls=_nvls(records, counts, graphs), collnet=_collnet(records, counts, graphs, connections),
        pat=_pat(_most_common(collected.versions), nranks, nnodes, tuning), tuning=tuning, graphs=graphs,
        errors=_errors(collected),
        ranks=ranks, communicators=_communicators(collected, primary), checks=tuple(checks),
        logs=tuple(log_names), topology=topology, launch=launch, nics=nics, notes=tuple(notes))


def _rank_info(r: RankRecord, exits: dict[str, Optional[int]]) -> RankInfo:
    return RankInfo(rank=r.identity.rank, host=r.host_id or r.hostname, hostname=r.hostname, pid=r.pid,
                    device=r.device, log=r.log, init_complete=r.init_complete, nvml_dev=r.nvml_dev,
                    busid=r.busid, local_rank=r.local_rank, exit_status=exits.get(r.log),
                    nccl_version=r.nccl_version)


def _rank_checks(records: list[RankRecord], nranks: Optional[int]) -> list[Check]:
    if not nranks:
        return [Check("a communicator was initialised", False, "no `comm .. rank .. nRanks` or Init line in any log")]
    missing = sorted(set(range(nranks)) - {r.identity.rank for r in records})
    incomplete = [r.identity.rank for r in records if not r.init_complete]
    return [Check("every rank logged", not missing, f"missing ranks {missing}" if missing else f"{nranks} ranks"),
            Check("every rank completed init", not incomplete and not missing,
                  f"no Init COMPLETE from ranks {sorted(set(incomplete) | set(missing))}" if incomplete or missing
                  else "")]


def _host_map(ranks: tuple[RankInfo, ...], hosts: tuple[str, ...], nnodes: Optional[int],
              checks: list[Check]) -> Optional[dict[int, str]]:
    """Rank -> host, or None when the logs cannot tell hosts apart (NCCL counts
    more nodes than there are names: NCCL_HOSTID was not logged)."""
    if nnodes is not None:
        ok = len(hosts) == nnodes
        checks.append(Check("hosts match NCCL's node count", ok,
                            f"{len(hosts)} host name(s) for nNodes {nnodes}" +
                            ("" if ok else "; connections are placed by transport (NET between hosts)")))
        if not ok:
            return None
    return {r.rank: r.host for r in ranks if r.host is not None}


def _by_channel(records: list[RankRecord], attr: str) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for r in records:
        for channel, item in getattr(r, attr).items():
            out.setdefault(channel, []).append(item)
    return out


def _by_channel_rank(records: list[RankRecord], attr: str) -> dict[int, dict[int, Any]]:
    out: dict[int, dict[int, Any]] = {}
    for r in records:
        for channel, link in getattr(r, attr).items():
            out.setdefault(channel, {})[link.rank] = link
    return out


def _scope(transport: str, src: int, dst: Optional[int], host_of: Optional[dict[int, str]]) -> Optional[str]:
    if host_of is None or dst is None:
        # CollNet always leaves the host; without host names, NET is what NCCL uses between hosts.
        return "inter_host" if transport.startswith(("NET", "COLLNET")) else "intra_host"
    a, b = host_of.get(src), host_of.get(dst)
    if a is None or b is None:
        return None
    return "intra_host" if a == b else "inter_host"


def _connections(records: list[RankRecord], host_of: Optional[dict[int, str]]) -> tuple[Connection, ...]:
    """One entry per link: NET links are logged by both ends ([send] and [receive])."""
    merged: dict[tuple[Any, ...], tuple[pl.ConnLine, set[str]]] = {}
    for r in records:
        for c in r.connections:
            kind = pl.parse_via(c.via).transport
            key = (c.channel, c.conn_index, c.src, c.dst, kind)
            first, sides = merged.setdefault(key, (c, set()))
            if c.side == "send" and first.side != "send":
                merged[key] = (c, sides)  # the sender's NIC names the link
            if c.side:
                sides.add(c.side)
    out = []
    for (channel, index, src, dst, kind), (line, sides) in merged.items():
        direction = "both" if len(sides) == 2 else (next(iter(sides)) if sides else None)
        out.append(Connection(channel=channel, src=src, dst=dst, transport=kind, via=line.via, conn_index=index,
                              direction=direction, scope=_scope(kind, src, dst, host_of)))
    return tuple(sorted(out, key=lambda c: (c.conn_index or 0, c.channel, c.src, -1 if c.dst is None else c.dst)))


def _transports(connections: tuple[Connection, ...]) -> Transports:
    counts = Counter(c.transport for c in connections)

    def kinds(scope: Optional[str]) -> tuple[str, ...]:
        return tuple(sorted({c.transport for c in connections if c.scope == scope}))
    return Transports(counts=dict(sorted(counts.items())), intra_host=kinds("intra_host"),
                      inter_host=kinds("inter_host"), unknown_scope=kinds(None))


def _channel_counts(records: list[RankRecord], rank0: Optional[RankRecord], checks: list[Check]) -> dict[str, int]:
    seen = {tuple(sorted(r.channel_counts.items())) for r in records if r.channel_counts}
    if len(seen) > 1:
        checks.append(Check("ranks agree on channel counts", False, f"{len(seen)} different sets"))
    if rank0 is not None and rank0.channel_counts:
        return rank0.channel_counts
    return next((r.channel_counts for r in records if r.channel_counts), {})


def _graph_channels(graphs: tuple[Graph, ...], *kinds: str) -> Optional[int]:
    found = [g.nchannels for g in graphs if g.kind in kinds]
    return max(found) if found else None


def _nvls(records: list[RankRecord], counts: dict[str, int], graphs: tuple[Graph, ...]) -> Feature:
    support = [r.nvls_supported for r in records if r.nvls_supported is not None]
    channels = counts.get("nvls")
    graph_channels = _graph_channels(graphs, "nvls")
    used = channels > 0 if channels is not None else bool(graph_channels)
    return Feature(channels=channels, graph_channels=graph_channels, used=used,
                   supported=all(support) if support else None, heads=_nvls_heads(records) if used else ())


def _nvls_heads(records: list[RankRecord]) -> tuple[tuple[int, ...], ...]:
    """NCCL prints `NVLS Head` lines on several hosts only; on one host each
    rank's `NVLS comm` line says which head it is."""
    printed = next((r.nvls_heads for r in records if r.nvls_heads), None)
    if printed:
        return tuple(printed[h] for h in sorted(printed))
    mine = {r.nvls_head[0]: r.identity.rank for r in records if r.nvls_head is not None and r.nvls_head[0] >= 0}
    return tuple((mine[h],) for h in sorted(mine))


def _collnet(records: list[RankRecord], counts: dict[str, int], graphs: tuple[Graph, ...],
             connections: tuple[Connection, ...]) -> Feature:
    """NCCL prints `N collnet channels` even with no CollNet device, so `used`
    needs devices on every rank (or CollNet connections in the log)."""
    devices = [r.collnet_devices for r in records if r.collnet_devices is not None]
    supported = min(devices) > 0 if devices else None
    channels = counts.get("collnet")
    graph_channels = _graph_channels(graphs, "collnet_chain", "collnet_direct")
    used = any(c.transport.startswith("COLLNET") for c in connections) or (
        supported is True and bool(channels) and graph_channels != 0)
    return Feature(channels=channels, graph_channels=graph_channels, used=used, supported=supported)


def _pat(version: Optional[str], nranks: Optional[int], nnodes: Optional[int],
         tuning: tuple[TuningEntry, ...]) -> Pat:
    used = tuple(dict.fromkeys(t.collective for t in tuning if t.algorithm == "PAT"))
    if used:
        return Pat(True, used)
    release = tuple(int(x) for x in re.findall(r"\d+", version or "")[:2])
    if len(release) == 2 and release < (2, 23):
        return Pat(False, (), f"NCCL {version} has no PAT (2.23 and later)")
    if nranks and nnodes and nranks != nnodes:
        per_host = f"{nranks // nnodes}" if nranks % nnodes == 0 else "several"
        return Pat(False, (), f"{per_host} ranks per host; NCCL uses PAT with one rank per host")
    if nranks and nnodes:
        return Pat(True, (), "not chosen at these sizes")
    return Pat(None, ())


def _tuning(records: list[RankRecord]) -> tuple[TuningEntry, ...]:
    """Rank 0's `Bytes -> Algo` lines; the `Best tuning` lines that every rank
    logs stand in when rank 0's are missing (no channel count there)."""
    entries: dict[tuple[Any, ...], int] = {}
    for r in records:
        for t in r.tuning:
            key = (t.collective or "unknown", t.nbytes, t.algorithm, t.protocol, t.channels, "tuning")
            entries[key] = entries.get(key, 0) + 1
    if not entries:
        for r in records:
            for coll, nbytes, algo, proto in r.best_tuning:
                if nbytes is not None:
                    key = (coll, nbytes, algo, proto, None, "best_tuning")
                    entries[key] = entries.get(key, 0) + 1
            if entries:
                break  # one rank's view: the others made the same choices
    return tuple(TuningEntry(c, n, a, p, ch, calls, src) for (c, n, a, p, ch, src), calls in entries.items())


def _graphs_from_log(rank0: RankRecord) -> tuple[Graph, ...]:
    """Rank 0's `Pattern ..` lines when there is no graph dump (ids unknown: the
    first tree-like search is the tree, a later pattern-3 one is collnet chain)."""
    graphs: list[Graph] = []
    for g in rank0.graph_lines:
        kind = dumps.graph_kind(None, g.pattern)
        if kind == "tree" and any(x.kind == "tree" for x in graphs):
            kind = "collnet_chain"
        graphs.append(Graph(kind=kind, graph_id=None, pattern=g.pattern, nchannels=g.nchannels,
                            speed_intra=g.speed_intra, speed_inter=g.speed_inter, type_intra=g.type_intra,
                            type_inter=g.type_inter, crossnic=g.crossnic, same_channels=g.same_channels,
                            source="log"))
    return tuple(graphs)


def _errors(collected: Collected) -> tuple[ErrorEntry, ...]:
    return tuple(ErrorEntry(rank=e.identity.rank if e.identity else None, log=e.log, message=e.message,
                            level=e.level, source=e.source, line=e.line) for e in collected.errors)


def _communicators(collected: Collected, primary: Optional[str]) -> tuple[CommSummary, ...]:
    out = []
    for key in collected.comm_order:
        recs = [r for (k, _), r in collected.ranks.items() if k == key]
        out.append(CommSummary(comm_id=key, nranks=max(r.identity.nranks for r in recs),
                               nnodes=_most_common(r.nnodes for r in recs), ranks_logged=len(recs),
                               init_complete=sum(r.init_complete for r in recs), primary=key == primary))
    return tuple(out)
