"""The NIC each inter-host connection leaves by, against the NIC nearest the
sending GPU in the topology graph of the run's hosts (`ncclsim.topology`).

A NIC counts as near when its path is as wide as the nearest's and, as NCCL
ranks GPU-NIC paths for GPU Direct (PIX and PXB alike), stays below the PCIe
switches if the nearest's does: on a board with two GPUs and two NICs per
switch complex, a ring that enters by one GPU's NIC leaves by the same NIC
from the other GPU (NCCL keeps a ring's NIC), more hops but no CPU crossed.

Read from the topology files (`hosts/h<i>/topo.xml`, else NCCL's dump of rank
0's host for every host) and the report's ranks and connections, never from
`run.json`. Anything missing or unreadable leaves the check out, with a note:
this is an extra, the report stands without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from ncclsim import NcclsimError
from ncclsim.platform.models import load_models
from ncclsim.report import parse_log as pl
from ncclsim.report.model import Check, Connection, NicPath, Nics, NicUse, RankInfo, RankNics
from ncclsim.topology.graph import nic_node
from ncclsim.topology.graph_paths import TopoPath, host_part, nic_paths
from ncclsim.report.run_hosts import host_files, hosts_graph, rank_gpus

CHECK_NAME = "inter-host connections leave by the GPU's nearest NIC"


def nic_use(run_dir: Path, nhosts: int, hosts: Sequence[str], ranks: Sequence[RankInfo],
            connections: Sequence[Connection], notes: list[str]) -> tuple[Optional[Nics], Optional[Check]]:
    """The NICs per rank and the check (None when there is no inter-host NET
    connection to judge); (None, None) with a note when the topology cannot be had."""
    files = host_files(run_dir, nhosts)
    if files is None:
        notes.append("NICs not checked: no topology (hosts/h<i>/topo.xml or NCCL's topo dump)")
        return None, None
    try:
        return _nic_use(run_dir, files, hosts, ranks, connections, notes)
    except NcclsimError as e:
        notes.append(f"NICs not checked: {e}")
    except Exception as e:  # an odd topology file must not cost the whole report
        notes.append(f"NICs not checked: {type(e).__name__}: {e}")
    return None, None


def _nic_use(run_dir: Path, files: list[Path], hosts: Sequence[str], ranks: Sequence[RankInfo],
             connections: Sequence[Connection], notes: list[str]) -> tuple[Nics, Optional[Check]]:
    g = hosts_graph(files, hosts, load_models())
    gpu_of = rank_gpus(g, [r.to_json() for r in ranks], hosts, notes)
    # leaving rank -> NIC node -> channels; the rank whose GPU the data leaves
    # from is the proxy rank of a PXN connection (`NET/IB/0(2)`), else the sender.
    sent: dict[int, dict[str, set[int]]] = {}
    hosts_with_nics = {a["host"] for _, a in g.nodes(data=True) if a["kind"] == "nic"}
    for c in connections:
        via = pl.parse_via(c.via)
        if c.scope != "inter_host" or not c.transport.startswith("NET/") or via.net_dev is None \
                or c.direction == "receive":  # a receiver's line names the receiver's NIC
            continue
        leaving = via.proxy_rank if via.proxy_rank is not None else c.src
        gpu = gpu_of.get(leaving)
        # A host without NICs sends by NCCL's socket transport, over an IP interface.
        if gpu is not None and g.nodes[gpu]["host"] in hosts_with_nics:
            host = g.nodes[g.nodes[gpu]["host"]]["index"]
            sent.setdefault(leaving, {}).setdefault(nic_node(host, via.net_dev), set()).add(c.channel)
    parts = {host: host_part(g, host) for host in {g.nodes[gpu]["host"] for gpu in gpu_of.values()}}
    out = [_rank_nics(g, rank, gpu, sent.get(rank, {}), parts[g.nodes[gpu]["host"]])
           for rank, gpu in sorted(gpu_of.items())]
    nics = Nics(tuple(f.relative_to(run_dir).as_posix() for f in files), tuple(out))
    return nics, (_check(out) if sent else None)


def _rank_nics(g: Any, rank: int, gpu: str, used: dict[str, set[int]], part: Any = None) -> RankNics:
    paths = {p.nodes[-1]: p for p in nic_paths(g, gpu, part)}  # best first
    best: Optional[TopoPath] = next(iter(paths.values()), None)
    nearest = NicPath(best.nodes[-1], best.bottleneck_gbps, best.hops) if best else None

    def reach(p: TopoPath) -> tuple[float, bool]:
        return p.bottleneck_gbps or 0.0, any(g.nodes[n]["kind"] == "cpu" for n in p.nodes[1:-1])

    uses = []
    for nic, channels in sorted(used.items()):
        p = paths.get(nic)
        near = p is not None and best is not None and reach(p) == reach(best)
        uses.append(NicUse(nic, p.bottleneck_gbps if p else None, p.hops if p else None,
                           tuple(sorted(channels)), near))
    return RankNics(rank, gpu, nearest, tuple(uses))


def _gbps(p: Optional[NicPath]) -> str:
    if p is None:
        return "no NIC"
    if p.hops is None:
        return f"{p.nic} (not in the topology)"
    return f"{p.nic} ({'?' if p.path_gbps is None else f'{p.path_gbps:g}'} GB/s, {p.hops} hops)"


def _check(ranks: list[RankNics]) -> Check:
    bad = [(r, u) for r in ranks for u in r.used if not u.nearest]
    if not bad:
        sending = [r for r in ranks if r.used]
        return Check(CHECK_NAME, True, f"{len(sending)} sending rank(s), "
                                       f"{len({u.nic for r in sending for u in r.used})} NIC(s)")
    r, u = bad[0]
    more = len({x.rank for x, _ in bad}) - 1
    return Check(CHECK_NAME, False,
                 f"rank {r.rank} ({r.gpu}) channel {u.channels[0]}: leaves by {_gbps(u)}, "
                 f"nearest {_gbps(r.nearest)}" + (f"; {more} more rank(s)" if more else ""))
