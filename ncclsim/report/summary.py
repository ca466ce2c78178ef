"""The report as text a person reads first: what NCCL built, and what went wrong."""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from ncclsim.report.model import Feature, Report, Timing, TreeNode
from ncclsim.sizes import human_bytes


def rank_ranges(ranks: Iterable[int]) -> str:
    """[0,1,2,3,5] -> "0-3,5"."""
    out: list[str] = []
    items = sorted(set(ranks))
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out)


def _grouped(per_channel: dict[int, str]) -> list[tuple[str, str]]:
    """Channels with identical text share one line: ("0-23", text)."""
    groups: dict[str, list[int]] = {}
    for channel, text in sorted(per_channel.items()):
        groups.setdefault(text, []).append(channel)
    return [(rank_ranges(chs), text) for text, chs in sorted(groups.items(), key=lambda kv: kv[1][0])]


# Up to this many hosts rings, trees, hosts' ranks and NVLS heads are shown
# rank by rank; past it only where they cross hosts, or by first and last (a
# line of every rank of 64 hosts is 2-7 KB).
WHOLE_UP_TO_HOSTS = 8


def _whole(report: Report) -> bool:
    return len(report.hosts) <= WHOLE_UP_TO_HOSTS


def _ring_text(ring: Sequence[int], host_of: dict[int, Optional[str]], whole: bool) -> str:
    """Ranks in ring order, `|` where the ring crosses to another host; not
    `whole`: each host's first and last rank (`0..1`)."""
    segments: list[list[int]] = []
    for i, r in enumerate(ring):
        if not i or host_of.get(r) != host_of.get(ring[i - 1]):
            segments.append([])
        segments[-1].append(r)
    return " | ".join(" ".join(map(str, seg)) if whole or len(seg) == 1 else f"{seg[0]}..{seg[-1]}"
                      for seg in segments)


def _tree_text(nodes: dict[int, TreeNode], host_of: dict[int, Optional[str]], whole: bool) -> str:
    """rank(parent>children) of every rank; not `whole`: of the ranks linked
    to another host."""
    def crosses(r: int, n: TreeNode) -> bool:
        return any(host_of.get(x) != host_of.get(r) for x in (n.up, *n.down) if x is not None)
    return " ".join(f"{r}({'root' if n.up is None else n.up}"
                    f"{'>' + ','.join(map(str, n.down)) if n.down else ''})"
                    for r, n in sorted(nodes.items()) if whole or crosses(r, n))


def _heads_text(heads: tuple[tuple[int, ...], ...], hosts: int, whole: bool) -> str:
    """NVLS heads, each as its rank on every host; not `whole`: the first two
    and the last. NCCL logs a head's ranks on the first 20 hosts."""
    text = " ".join("/".join(map(str, h)) if whole or len(h) <= 3
                    else f"{h[0]}/{h[1]}/.../{h[-1]}" for h in heads)
    logged = min(len(h) for h in heads)
    return f"heads: ranks {text}" + (f" (on the first {logged} hosts: NCCL logs no more)" if logged < hosts else "")


def _feature_text(name: str, f: Feature, unsupported: str, unasked: str = "", hosts: int = 1,
                  whole: bool = True) -> str:
    state = "used" if f.used else "not used"
    details = []
    if f.channels is not None:
        details.append(f"{f.channels} channels")
    if f.graph_channels is not None:
        details.append(f"graph {f.graph_channels} channels")
    if f.supported is False:
        details.append(unsupported)
    elif f.supported is None and not f.used and unasked:
        details.append(unasked)
    if f.heads:
        details.append(_heads_text(f.heads, hosts, whole))
    return f"{name}: {state}" + (f" ({', '.join(details)})" if details else "")


def _pat_text(report: Report) -> str:
    pat = report.pat
    if pat.used_by:
        return f"PAT: used ({', '.join(pat.used_by)})"
    if pat.available is None:
        return "PAT: ?"
    return f"PAT: {'available' if pat.available else 'not available'}" + (f" ({pat.why_not})" if pat.why_not else "")


def _nccl_text(report: Report) -> str:
    """The NCCL the ranks loaded: one version, or each with its ranks when they differ."""
    by_version: dict[str, list[int]] = {}
    for r in report.ranks:
        if r.nccl_version:
            by_version.setdefault(r.nccl_version, []).append(r.rank)
    if len(by_version) > 1:
        return "NCCL " + ", ".join(f"{v} (ranks {rank_ranges(rs)})" for v, rs in sorted(by_version.items()))
    return f"NCCL {report.nccl_version or '(version not logged)'}"


def _hosts_text(by_host: dict[str, list[int]], whole: bool) -> str:
    """Each host's ranks; not `whole`, when every host holds the same number
    of ranks in host order: the first and last host."""
    listed = [f"{h}: ranks {rank_ranges(rs)}" for h, rs in by_host.items()]
    sizes = {len(rs) for rs in by_host.values()}
    in_order = [r for rs in by_host.values() for r in rs] == list(range(sum(map(len, by_host.values()))))
    if whole or len(sizes) != 1 or not in_order:
        return "; ".join(listed)
    return f"{sizes.pop()} per host in host order: {listed[0]}; ...; {listed[-1]}"


def _header(report: Report) -> list[str]:
    lines = [f"{_nccl_text(report)} -- {report.run_dir}"]
    by_host: dict[str, list[int]] = {}
    for r in report.ranks:
        by_host.setdefault(r.host or "?", []).append(r.rank)
    hosts = _hosts_text(by_host, _whole(report))
    lines.append(f"Ranks: {report.nranks if report.nranks is not None else '?'} on {len(report.hosts)} host(s) "
                 f"(nNodes {report.nnodes if report.nnodes is not None else '?'}, "
                 f"localRanks {report.local_ranks if report.local_ranks is not None else '?'})"
                 + (f" -- {hosts}" if hosts else ""))
    done = sum(r.init_complete for r in report.ranks)
    lines.append(f"Init complete: {done}/{report.nranks if report.nranks is not None else len(report.ranks)}")
    failed_exits = [r.rank for r in report.ranks if r.exit_status not in (None, 0)]
    if failed_exits:
        lines.append(f"Non-zero exit: ranks {rank_ranges(failed_exits)}")
    lines.append(f"Channels: {report.channels if report.channels is not None else '?'} coll"
                 + (f", {report.p2p_channels} p2p" if report.p2p_channels is not None else ""))
    lines.append(_feature_text("NVLS", report.nvls, "no multicast: the GPUs or NVSwitches lack it",
                               hosts=len(report.hosts), whole=_whole(report)) + "; "
                 + _feature_text("CollNet", report.collnet,
                                 "no CollNet devices: the network does not reduce in its switches (launch --collnet)",
                                 "not enabled: NCCL_COLLNET_ENABLE=1 turns it on"))
    lines.append(_pat_text(report))
    if len(report.communicators) > 1:
        lines.append(f"Communicators: {len(report.communicators)} (reporting the largest, "
                     f"{next(c.comm_id for c in report.communicators if c.primary)})")
    return lines


def _graphs(report: Report) -> list[str]:
    if not report.graphs:
        return []
    source = "graph dump" if report.graphs[0].source == "graph_dump" else "rank 0's log"
    lines = [f"Graphs (from {source}):"]
    for g in report.graphs:
        lines.append(f"  {g.kind:<15} pattern {g.pattern}  {g.nchannels} channel(s)  "
                     f"intra {g.type_intra} {g.speed_intra} GB/s  inter {g.type_inter} {g.speed_inter} GB/s")
    return lines


MAX_LISTED = 4  # channels shown per structure; run.json has them all


def _listed(title: str, groups: list[tuple[str, str]]) -> list[str]:
    lines = [title] + [f"  channel {chs}: {text}" for chs, text in groups[:MAX_LISTED]]
    if len(groups) > MAX_LISTED:
        lines.append(f"  ... {len(groups) - MAX_LISTED} more (all of them: run.json)")
    return lines


def _structure(report: Report) -> list[str]:
    host_of = {r.rank: r.host for r in report.ranks}
    whole = _whole(report)
    every = f"{len(report.hosts)} hosts, every rank: run.json"
    lines = []
    if report.rings:
        lines += _listed("Rings, in order (| = next host):" if whole else
                         f"Rings, in order, a host's ranks as first..last (| = next host; {every}):",
                         _grouped({c: _ring_text(r, host_of, whole) for c, r in report.rings.items()}))
    if report.trees:
        lines += _listed("Trees, rank(parent>children):" if whole else
                         f"Trees, rank(parent>children) of the ranks linked to another host ({every}):",
                         _grouped({c: _tree_text(n, host_of, whole) for c, n in report.trees.items()}))
    return lines


def _transports(report: Report) -> list[str]:
    t = report.transports
    if not t.counts:
        return ["Connections: none logged (NCCL connects at first use unless NCCL_RUNTIME_CONNECT=0)"]
    lines = [f"Connections: {sum(t.counts.values())}"]
    for scope, kinds in (("intra-host", t.intra_host), ("inter-host", t.inter_host), ("unknown", t.unknown_scope)):
        for kind in kinds:
            n = sum(1 for c in report.connections if c.transport == kind and
                    (c.scope or "unknown") == scope.replace("-", "_"))
            lines.append(f"  {scope:<10}  {kind:<24} {n}")
    sending = [r for r in report.nics.ranks if r.used] if report.nics else []
    if sending:
        near = sum(all(u.nearest for u in r.used) for r in sending)
        files = list(dict.fromkeys(report.nics.topology))
        shown = ", ".join(files) if len(files) <= 2 else f"{files[0]} ... {files[-1]}, {len(files)} files"
        lines.append(f"  NICs between hosts: {near} of {len(sending)} sending rank(s) use their GPU's nearest "
                     f"(topology: {shown})")
    return lines


def _tuning(report: Report) -> list[str]:
    if not report.tuning:
        return []
    source = "rank 0" if report.tuning[0].source == "tuning" else "Best tuning lines"
    lines = [f"Algorithm/protocol by collective and size ({source}):"]
    for t in report.tuning:
        channels = f"{t.channels} ch" if t.channels is not None else ""
        calls = f"  x{t.calls}" if t.calls > 1 else ""
        algo = f"{t.algorithm}/{t.protocol}"
        lines.append(f"  {t.collective:<14} {human_bytes(t.nbytes):>9}  {algo:<21} {channels}{calls}".rstrip())
    return lines


MAX_TIMINGS = 24  # rows of the modelled-time table; more, and each collective shows evenly spread sizes
TIMINGS_PER_COLLECTIVE = 12


def _spread(items: list[Timing], most: int) -> list[Timing]:
    """At most `most` of `items`, evenly spread, the first and the last among them."""
    if len(items) <= most:
        return items
    return [items[round(i * (len(items) - 1) / (most - 1))] for i in range(most)]


def _timings(report: Report) -> list[str]:
    if not report.timings:
        return _timeline(report)
    shown = list(report.timings)
    if len(shown) > MAX_TIMINGS:
        by_coll: dict[str, list[Timing]] = {}
        for t in shown:
            by_coll.setdefault(t.collective, []).append(t)
        shown = [t for items in by_coll.values() for t in _spread(items, TIMINGS_PER_COLLECTIVE)]
    several = len({t.nranks for t in report.timings}) > 1
    lines = ["Modelled time (median call, from its last rank's kernel start to the last end; "
             "nccl-tests' size and bus bandwidth):",
             f"  {'collective':<14} {'size':>9}  {'algo/proto':<17} {'time us':>10} {'busbw GB/s':>11}"]
    for t in shown:
        ranks = f"  {t.nranks} ranks" if several else ""
        algo = f"{t.algorithm}/{t.protocol}" if t.algorithm or t.protocol else "-"
        lines.append(f"  {t.collective:<14} {human_bytes(t.nbytes):>9}  {algo:<17} "
                     f"{t.time_us:>10.1f} {t.busbw_gbps:>11.1f}{ranks}")
    if len(shown) < len(report.timings):
        lines.append(f"  ... {len(report.timings) - len(shown)} more (all of them: run.json)")
    return lines + _timeline(report)


def _timeline(report: Report) -> list[str]:
    if not report.timeline:
        return []
    return [f"Timeline: {report.timeline} in the run directory (open it in ui.perfetto.dev or chrome://tracing)"]


def _checks(report: Report) -> list[str]:
    failed = [c for c in report.checks if not c.ok]
    if not failed:
        return [f"Checks: {len(report.checks)} passed"]
    return [f"Checks: {len(failed)} of {len(report.checks)} FAILED"] + [f"  {c.name}: {c.detail}" for c in failed]


def _errors(report: Report) -> list[str]:
    if not report.errors:
        return ["NCCL warnings: none"]
    groups: dict[str, list] = {}
    for e in report.errors:
        groups.setdefault(e.message, []).append(e)
    lines = [f"NCCL warnings: {len(report.errors)} WARN line(s)"]
    for message, items in groups.items():
        ranks = [e.rank for e in items if e.rank is not None]
        where = f"rank{'s' if len(set(ranks)) > 1 else ''} {rank_ranges(ranks)}" if ranks else "rank ?"
        first = items[0]
        lines.append(f"  [{where}] {message}  ({first.log}:{first.line})")
    return lines


def summary_text(report: Report) -> str:
    sections = [_header(report), _graphs(report), _structure(report), _transports(report),
                _tuning(report), _timings(report), _checks(report), _errors(report),
                ["Notes:"] + [f"  {n}" for n in report.notes] if report.notes else []]
    return "\n".join(line for section in sections for line in section) + "\n"
