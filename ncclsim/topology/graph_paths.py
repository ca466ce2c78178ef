"""Paths in the topology graph between two GPUs, or a GPU and its NICs, with
their bottleneck bandwidth.

The path chosen is the widest one (largest bottleneck), then the shortest; a
GPU or a host is never a relay in the middle of a path (NCCL's PXN, which
relays through a peer GPU, is a choice NCCL makes, not a path). One path over
NVSwitches uses one of them: `nvlink_flow_gbps` adds up all of a GPU pair's
NVLink routes, as NCCL counts a GPU's NVLinks to its NVSwitches together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import networkx as nx

from ncclsim.topology.graph import TopologyGraphError, nodes_of

_NOT_RELAYS = frozenset({"gpu", "host"})


@dataclass(frozen=True)
class TopoPath:
    nodes: tuple[str, ...]
    kinds: tuple[str, ...]  # the kind of each link along the path
    bottleneck_gbps: Optional[float]  # None: a link's bandwidth is unknown

    @property
    def hops(self) -> int:
        return len(self.kinds)


def bottleneck_gbps(g: nx.Graph, nodes: tuple[str, ...]) -> Optional[float]:
    bws = [g.edges[a, b]["bandwidth_gbps"] for a, b in zip(nodes, nodes[1:])]
    return None if not bws or any(bw is None for bw in bws) else min(bws)


def widths(g: nx.Graph) -> list[float]:
    """Every known bandwidth of g's links, widest first."""
    return sorted({bw for _, _, bw in g.edges(data="bandwidth_gbps") if bw is not None}, reverse=True)


def best_path(g: nx.Graph, src: str, dst: str, thresholds: Optional[Sequence[float]] = None) -> TopoPath:
    """thresholds: widths(g), from a caller asking for many paths of one graph
    (any set holding the bandwidths of the links src and dst may use finds the
    same path: a width no such link has joins what the next wider one joins)."""
    for node in (src, dst):
        if node not in g:
            raise TopologyGraphError(f"{node}: no such node in the topology")
    # Inside one host nothing goes out to the network and back.
    barred = _NOT_RELAYS | ({"network", "nic"} if g.nodes[src]["host"] == g.nodes[dst]["host"]
                            else set())
    view = nx.subgraph_view(
        g, filter_node=lambda n: n in (src, dst) or g.nodes[n]["kind"] not in barred)
    known = widths(view) if thresholds is None else thresholds
    # Widest first: the largest threshold at which src and dst are still joined.
    for threshold in [*known, None]:
        sub = view if threshold is None else nx.subgraph_view(
            view, filter_edge=lambda a, b, t=threshold: (g.edges[a, b]["bandwidth_gbps"] or 0) >= t)
        try:
            nodes = tuple(nx.shortest_path(sub, src, dst))
        except nx.NetworkXNoPath:
            continue
        kinds = tuple(g.edges[a, b]["kind"] for a, b in zip(nodes, nodes[1:]))
        return TopoPath(nodes, kinds, bottleneck_gbps(g, nodes))
    raise TopologyGraphError(f"no path from {src} to {dst} in the topology")


def _check_kind(g: nx.Graph, node: str, kind: str) -> None:
    if node not in g or g.nodes[node]["kind"] != kind:
        raise TopologyGraphError(f"{node}: not a {kind} of the topology")


def gpu_path(g: nx.Graph, a: str, b: str) -> TopoPath:
    """The path between two GPUs, on one host or across the network."""
    _check_kind(g, a, "gpu")
    _check_kind(g, b, "gpu")
    return best_path(g, a, b)


def host_part(g: nx.Graph, host: str) -> nx.Graph:
    """One host's nodes (in g's order) and the links between them: a path
    between two of them never leaves the host."""
    members = [n for n, h in g.nodes(data="host") if h == host]
    part = g.__class__()
    part.add_nodes_from((n, g.nodes[n]) for n in members)
    part.add_edges_from(g.subgraph(members).edges(data=True))
    return part


def nic_paths(g: nx.Graph, gpu: str, part: Optional[nx.Graph] = None) -> list[TopoPath]:
    """Paths from a GPU to every NIC of its host, best first (widest, then
    shortest). `part`: the host's part of g (host_part), which a caller asking
    for every GPU of many hosts makes once per host (searching the whole graph
    for every GPU takes time growing with the square of the number of hosts)."""
    _check_kind(g, gpu, "gpu")
    local = host_part(g, g.nodes[gpu]["host"]) if part is None else part
    thresholds = widths(local)
    paths = [best_path(local, gpu, nic, thresholds) for nic in nodes_of(local, "nic")]
    return sorted(paths, key=lambda p: (-(p.bottleneck_gbps or 0.0), p.hops))


def nearest_nic(g: nx.Graph, gpu: str) -> Optional[str]:
    paths = nic_paths(g, gpu)
    return paths[0].nodes[-1] if paths else None


def nvlink_flow_gbps(g: nx.Graph, a: str, b: str) -> float:
    """What two GPUs can move to each other over NVLink alone, every NVSwitch
    (or direct link) together: the maximum flow of the NVLink links, no GPU
    relaying. 0 when they share no NVLink fabric."""
    _check_kind(g, a, "gpu")
    _check_kind(g, b, "gpu")
    fabric = nx.Graph()
    fabric.add_nodes_from((a, b))
    for x, y, attrs in g.edges(data=True):
        relays = [n for n in (x, y) if n not in (a, b)]
        if attrs["kind"] == "nvlink" and attrs["bandwidth_gbps"] and \
                all(g.nodes[n]["kind"] not in _NOT_RELAYS for n in relays):
            fabric.add_edge(x, y, capacity=attrs["bandwidth_gbps"])
    return float(nx.maximum_flow_value(fabric, a, b))
