"""The drawing model: what a topology picture shows, with the id each drawn
element carries in the SVG (`gid`), so a picture can be checked by structure
(`ncclsim topo render --json` prints it, schema_version 1).

Ids: `node:<node>` (`node:h0/gpu3`, `node:net`), `edge:<a>--<b>`
(`edge:h0/gpu3--h0/nvsw1`), `host:<host>`, and for a run's rings and trees
`<ring|tree>:ch<channel>:<from GPU>-><to GPU>` (`ring:ch2:h0/gpu3->h0/gpu4`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import networkx as nx

from ncclsim.topology.graph import hosts, iter_edges
from ncclsim.topology.layout import NODE_HEIGHT, NODE_WIDTH, Positions

SCHEMA_VERSION = 1
HOST_PADDING = 0.35  # units around a host's nodes
# Matplotlib's tab10, then tab20's lighter tones: distinct colours per channel.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
           "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5")
_NODE_FIELDS = ("kind", "label", "host")


@dataclass(frozen=True)
class Segment:
    """One hop of a ring or tree: from one rank's GPU to the next, through the
    NICs and the network when it leaves the host."""
    algorithm: str  # "ring" or "tree"
    channel: int
    src_rank: int
    dst_rank: int
    path: tuple[str, ...]  # node ids, GPU to GPU

    @property
    def id(self) -> str:
        return f"{self.algorithm}:ch{self.channel}:{self.path[0]}->{self.path[-1]}"


@dataclass(frozen=True)
class DrawNode:
    id: str
    kind: str
    label: str
    host: Optional[str]
    x: float
    y: float
    attrs: dict[str, Any]  # the graph node's other attributes (bus id, model, bandwidth...)

    @property
    def gid(self) -> str:
        return f"node:{self.id}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "gid": self.gid, "kind": self.kind, "label": self.label,
                "host": self.host, "x": round(self.x, 3), "y": round(self.y, 3),
                "attrs": self.attrs}


@dataclass(frozen=True)
class DrawEdge:
    id: str
    kind: str  # pcie, nvlink, inter_cpu, network
    source: str
    target: str
    count: Optional[int]  # NVLinks
    bandwidth_gbps: Optional[float]

    @property
    def gid(self) -> str:
        return f"edge:{self.id}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "gid": self.gid, "kind": self.kind, "source": self.source,
                "target": self.target, "count": self.count, "bandwidth_gbps": self.bandwidth_gbps}


@dataclass(frozen=True)
class DrawHost:
    id: str
    label: str
    box: tuple[float, float, float, float]  # x0, y0, x1, y1

    @property
    def gid(self) -> str:
        return f"host:{self.id}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "gid": self.gid, "label": self.label,
                "box": [round(v, 3) for v in self.box]}


@dataclass(frozen=True)
class DrawChannel:
    """One channel of one algorithm, its segments in the channel's colour."""
    algorithm: str
    channel: int
    colour: str
    ranks: tuple[int, ...]  # the ring's order (empty for a tree)
    segments: tuple[Segment, ...]

    def to_json(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "channel": self.channel, "colour": self.colour,
                "ranks": list(self.ranks),
                "segments": [{"id": s.id, "gid": s.id, "from_rank": s.src_rank,
                              "to_rank": s.dst_rank, "path": list(s.path)}
                             for s in self.segments]}


@dataclass(frozen=True)
class Drawing:
    title: str
    source: str
    source_kind: str  # preset, spec, xml, xml_dir, run
    layout: str  # grid or dot
    hosts: tuple[DrawHost, ...]
    nodes: tuple[DrawNode, ...]
    edges: tuple[DrawEdge, ...]
    channels: tuple[DrawChannel, ...] = ()
    notes: tuple[str, ...] = ()

    def gids(self) -> list[str]:
        """Every id the picture carries."""
        return [*(h.gid for h in self.hosts), *(n.gid for n in self.nodes),
                *(e.gid for e in self.edges),
                *(s.id for c in self.channels for s in c.segments)]

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "title": self.title, "source": self.source,
                "source_kind": self.source_kind, "layout": self.layout,
                "hosts": [h.to_json() for h in self.hosts],
                "nodes": [n.to_json() for n in self.nodes],
                "edges": [e.to_json() for e in self.edges],
                "channels": [c.to_json() for c in self.channels], "notes": list(self.notes)}


def _json_value(v: Any) -> Any:
    return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)


def build_drawing(g: nx.Graph, pos: Positions, *, title: str, source: str, source_kind: str,
                  layout: str, channels: Sequence[tuple[str, int, tuple[int, ...],
                                                        Sequence[Segment]]] = (),
                  notes: Sequence[str] = ()) -> Drawing:
    """`channels`: (algorithm, channel, ring order, segments); a ring and a tree
    of the same channel share its colour."""
    nodes = tuple(
        DrawNode(n, a["kind"], a["label"], a["host"], *pos[n],
                 {k: _json_value(v) for k, v in a.items() if k not in _NODE_FIELDS})
        for n, a in g.nodes(data=True) if a["kind"] != "host")
    edges = tuple(DrawEdge(e["id"], e["kind"], a, b, e.get("count"), e["bandwidth_gbps"])
                  for a, b, e in iter_edges(g))
    boxes = []
    for h in sorted(hosts(g), key=lambda h: g.nodes[h]["index"]):
        xs = [n.x for n in nodes if n.host == h]
        ys = [n.y for n in nodes if n.host == h]
        if xs:
            boxes.append(DrawHost(h, g.nodes[h]["label"], (
                min(xs) - NODE_WIDTH / 2 - HOST_PADDING, min(ys) - NODE_HEIGHT / 2 - HOST_PADDING,
                max(xs) + NODE_WIDTH / 2 + HOST_PADDING,
                max(ys) + NODE_HEIGHT / 2 + HOST_PADDING + 0.3)))  # room for the host's name
    order = sorted({c for _, c, _, _ in channels})
    drawn = tuple(DrawChannel(alg, c, PALETTE[order.index(c) % len(PALETTE)], ranks, tuple(segs))
                  for alg, c, ranks, segs in channels)
    return Drawing(title, source, source_kind, layout, tuple(boxes), nodes, edges, drawn,
                   tuple(notes))
