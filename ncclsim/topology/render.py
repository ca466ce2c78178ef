"""A Drawing as a picture, with matplotlib: SVG or PNG by the output's suffix.

Every node, edge, host box and ring/tree segment is one artist whose gid is
its id in the drawing model; the SVG writer turns gids into element ids.
Text stays text in the SVG and its hash salt is fixed, so the same drawing
gives the same file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import matplotlib
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch
from matplotlib.path import Path as MplPath

from ncclsim import NcclsimError
from ncclsim.topology.drawing import DrawChannel, Drawing
from ncclsim.topology.graph import NETWORK
from ncclsim.topology.layout import NODE_HEIGHT, NODE_WIDTH, UNIT_INCHES

FORMATS = {".svg": "svg", ".png": "png"}
PNG_DPI = 120
MARGIN = 0.4  # units
LEGEND_ROW = 0.22  # units per legend row

NODE_COLOURS = {  # face, edge
    "cpu": ("#fde3c0", "#b26a00"), "pci_switch": ("#e6e6e6", "#666666"),
    "gpu": ("#d9f0a3", "#4d7c0f"), "nic": ("#cfe3f7", "#1f5a99"),
    "nvswitch": ("#a5d6a7", "#1b5e20"), "network": ("#d6d0f0", "#4b3f99"),
}
EDGE_STYLES: dict[str, dict[str, Any]] = {
    "pcie": {"color": "#8a8a8a", "linewidth": 1.0},
    "nvlink": {"color": "#5a9e00", "alpha": 0.55},  # width grows with the link count
    "inter_cpu": {"color": "#d98c00", "linewidth": 2.2},
    "network": {"color": "#4b3f99", "linewidth": 1.0, "linestyle": (0, (4, 2))},
}
EDGE_NAMES = {"pcie": "PCIe", "nvlink": "NVLink (width: count)",
              "inter_cpu": "CPU interconnect", "network": "network"}


class RenderError(NcclsimError):
    """A picture that cannot be written."""


def picture_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise RenderError(f"{path}: unknown picture format {path.suffix or '(no suffix)'!r}: "
                          "name the output .svg or .png")
    return fmt


def render(d: Drawing, path: Path) -> None:
    fmt = picture_format(path)
    with matplotlib.rc_context({"svg.hashsalt": "ncclsim", "svg.fonttype": "none",
                                "font.family": "DejaVu Sans", "font.size": 5.5}):
        fig = _figure(d)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if fmt == "svg":
                fig.savefig(path, format="svg", metadata={"Date": None})
            else:
                fig.savefig(path, format="png", dpi=PNG_DPI)
        except OSError as e:
            raise RenderError(f"cannot write {path}: {e.strerror or e}") from None


def _legend_entries(d: Drawing) -> list[Any]:
    kinds = sorted({e.kind for e in d.edges}, key=list(EDGE_NAMES).index)
    entries: list[Any] = [Line2D([], [], label=EDGE_NAMES[k],
                                 **{**EDGE_STYLES[k], "linewidth": 1.5 if k == "nvlink" else
                                    EDGE_STYLES[k]["linewidth"], "alpha": 1})
                          for k in kinds]
    for c in d.channels:
        entries.append(Line2D([], [], color=c.colour, linewidth=1.2,
                              linestyle="-" if c.algorithm == "ring" else "--",
                              label=f"{c.algorithm} {c.channel}"))
    return entries


def _figure(d: Drawing) -> Figure:
    xs = [v for h in d.hosts for v in (h.box[0], h.box[2])] + [n.x for n in d.nodes]
    ys = [v for h in d.hosts for v in (h.box[1], h.box[3])] + [n.y for n in d.nodes]
    entries = _legend_entries(d)
    ncol = max(1, math.ceil(len(entries) / 4))
    legend_h = min(len(entries), 4) * LEGEND_ROW + 0.2
    x0, x1 = min(xs) - NODE_WIDTH / 2 - MARGIN, max(xs) + NODE_WIDTH / 2 + MARGIN
    y0, y1 = min(ys) - NODE_HEIGHT / 2 - MARGIN - legend_h, max(ys) + MARGIN + 0.4
    fig = Figure(figsize=((x1 - x0) * UNIT_INCHES, (y1 - y0) * UNIT_INCHES))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.text(x0 + MARGIN, y1 - 0.25, d.title, fontsize=8, fontweight="bold", va="top")
    for h in d.hosts:
        bx0, by0, bx1, by1 = h.box
        ax.add_patch(FancyBboxPatch((bx0, by0), bx1 - bx0, by1 - by0,
                                    boxstyle="round,pad=0,rounding_size=0.15", facecolor="#f7f7f7",
                                    edgecolor="#999999", linewidth=0.8, zorder=0, gid=h.gid))
        ax.text(bx0 + 0.12, by1 - 0.08, h.label, fontsize=7, fontweight="bold", va="top", zorder=1)
    _draw_edges(ax, d)
    patches = _draw_nodes(ax, d)
    for i, c in enumerate(d.channels):
        _draw_channel(ax, d, c, i, len(d.channels), patches)
    if entries:
        ax.legend(handles=entries, loc="lower left", ncol=ncol, fontsize=5, frameon=False,
                  bbox_to_anchor=(0, 0), borderaxespad=0.6)
    return fig


def _network_span(d: Drawing) -> tuple[float, float]:
    """The network bar's ends: under the NICs it joins."""
    xs = [n.x for n in d.nodes if n.kind == "nic"] or [n.x for n in d.nodes]
    return min(xs) - NODE_WIDTH / 2, max(xs) + NODE_WIDTH / 2


def _draw_edges(ax: Any, d: Drawing) -> None:
    at = {n.id: (n.x, n.y) for n in d.nodes}
    for e in d.edges:
        (xa, ya), (xb, yb) = at[e.source], at[e.target]
        if e.kind == "network":
            xb = xa  # straight down to the bar
        style = dict(EDGE_STYLES.get(e.kind, EDGE_STYLES["pcie"]))
        if e.kind == "nvlink":
            style["linewidth"] = 0.4 + 0.18 * (e.count or 1)
        ax.add_line(Line2D([xa, xb], [ya, yb], zorder=1, gid=e.gid, **style))
        if e.kind == "nvlink" and e.count:
            # The count next to the GPU end, where edges to several switches fan out.
            ax.text(xa + (xb - xa) * 0.3, ya + (yb - ya) * 0.3, str(e.count), fontsize=4.5,
                    ha="center", va="center", color="#1b5e20", zorder=1.5)


def _draw_nodes(ax: Any, d: Drawing) -> dict[str, FancyBboxPatch]:
    patches = {}
    for n in d.nodes:
        face, edge = NODE_COLOURS.get(n.kind, ("#ffffff", "#000000"))
        left, right = _network_span(d) if n.kind == "network" else \
            (n.x - NODE_WIDTH / 2, n.x + NODE_WIDTH / 2)
        p = FancyBboxPatch((left, n.y - NODE_HEIGHT / 2), right - left, NODE_HEIGHT,
                           boxstyle="round,pad=0,rounding_size=0.06", facecolor=face,
                           edgecolor=edge, linewidth=0.8, zorder=3, gid=n.gid)
        ax.add_patch(p)
        ax.text(n.x, n.y, n.label, ha="center", va="center", zorder=4, linespacing=1.15)
        patches[n.id] = p
    return patches


def _route(at: dict[str, tuple[float, float]], path: tuple[str, ...],
           spread: float) -> list[tuple[float, float]]:
    """GPU -> NIC -> network -> NIC -> GPU in right angles: out of the GPU's
    bottom into a lane under its row, along it to the NIC's column, down to the
    network bar, along it and back up the same way. Each channel (`spread`,
    0..1) has its own lane and column offset, so channels sharing a NIC stay
    apart."""
    first, *middle, last = path
    nics = [n for n in middle if n != NETWORK] or [first, last]
    dx = (spread - 0.5) * 0.4
    lane = NODE_HEIGHT / 2 + 0.08 + 0.35 * spread
    bar_y = at[NETWORK][1] + (spread - 0.5) * NODE_HEIGHT * 0.7 if NETWORK in at else \
        min(at[first][1], at[last][1]) - 1.0

    def leg(gpu: str, nic: str) -> list[tuple[float, float]]:
        (x, y), nic_x = at[gpu], at[nic][0]
        return [(x + dx, y - NODE_HEIGHT / 2), (x + dx, y - lane), (nic_x + dx, y - lane),
                (nic_x + dx, bar_y)]

    return leg(first, nics[0]) + leg(last, nics[-1])[::-1]


def _draw_channel(ax: Any, d: Drawing, c: DrawChannel, i: int, n: int,
                  patches: Mapping[str, Patch]) -> None:
    at = {node.id: (node.x, node.y) for node in d.nodes}
    spread = i / max(n - 1, 1)  # 0..1: where this channel sits among those drawn
    style: dict[str, Any] = {"color": c.colour, "linewidth": 0.9, "zorder": 5,
             "linestyle": "-" if c.algorithm == "ring" else (0, (3, 1.5)),
             "arrowstyle": "-|>,head_length=3,head_width=1.6"}
    for s in c.segments:
        if len(s.path) == 2:
            # The arc's height in units, not its curvature, is what is set:
            # long hops clear the row of boxes they pass over but stay below
            # the next row (ROW away); channels stack up inside that band.
            (xa, ya), (xb, yb) = at[s.path[0]], at[s.path[1]]
            dist = max(math.hypot(xb - xa, yb - ya), 1e-6)
            height = min(0.45 + 0.1 * dist, 1.0) * (0.6 + 0.4 * spread)
            # arc3 puts its control point rad * dist away: the curve peaks at half that.
            rad = 2 * height / dist * (1 if c.algorithm == "ring" else -1)
            arrow = FancyArrowPatch(at[s.path[0]], at[s.path[1]], patchA=patches[s.path[0]],
                                    patchB=patches[s.path[1]], shrinkA=1, shrinkB=1,
                                    connectionstyle=f"arc3,rad={rad:.3f}", gid=s.id, **style)
        else:
            arrow = FancyArrowPatch(path=MplPath(_route(at, s.path, spread)), gid=s.id, **style)
        ax.add_patch(arrow)
