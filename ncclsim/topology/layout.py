"""Where each node of the topology graph goes, in layout units (the renderer
draws one unit as UNIT_INCHES).

`grid`: computed here, the same on every machine: hosts side by side; inside
a host, CPUs on top, PCIe switches by depth below them, then GPUs and NICs in
one row (in bus order, each under its switch), NVSwitches in a row below; the
network under everything. `dot`: Graphviz's layout, when `dot` is installed
(it does not keep hosts alike or bus order across ranks, so grid is the default).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from typing import Optional

import networkx as nx

from ncclsim import NcclsimError
from ncclsim.topology.graph import NETWORK, hosts, iter_edges, nodes_of

# Every node but the hosts, which are drawn as boxes around their nodes.
Positions = dict[str, tuple[float, float]]

UNIT_INCHES = 0.8
NODE_WIDTH = 0.86  # units
NODE_HEIGHT = 0.5
ROW = 1.25  # units between rows
HOST_GAP = 1.0  # units between hosts
_DOT_TIMEOUT_S = 60


class LayoutError(NcclsimError):
    """A layout that cannot be computed (dot missing or failing)."""


def compute_layout(g: nx.Graph, name: str = "grid") -> tuple[str, Positions]:
    """The layout's name as used ("auto" resolves to dot or grid) and the positions."""
    dot = shutil.which("dot")
    if name == "dot" and dot is None:
        raise LayoutError("--layout dot: Graphviz's `dot` is not on PATH (install graphviz), "
                          "or use --layout grid")
    if name == "grid" or dot is None:
        used, pos = "grid", grid_layout(g)
    else:
        used, pos = "dot", dot_layout(g, dot)
    _place_network(g, pos)
    return used, pos


def _place_network(g: nx.Graph, pos: Positions) -> None:
    """Under everything, centred on the NICs: the renderer draws it as a bar
    spanning them, each NIC dropping straight down to it."""
    bottom = min((y for n, (_, y) in pos.items() if n != NETWORK), default=0.0)
    xs = [pos[n][0] for n in nodes_of(g, "nic")] or [x for x, _ in pos.values()] or [0.0]
    pos[NETWORK] = ((min(xs) + max(xs)) / 2, bottom - ROW)


# ---- grid ----

def _children(g: nx.Graph) -> dict[str, list[str]]:
    below: dict[str, list[str]] = {}
    for node, parent in g.nodes(data="parent"):
        if parent is not None:
            below.setdefault(parent, []).append(node)
    return below


def _depth(g: nx.Graph, node: str) -> int:
    depth = 0
    while (node := g.nodes[node].get("parent")) is not None:
        depth += 1
    return depth


def grid_layout(g: nx.Graph) -> Positions:
    below = _children(g)
    switch_rows = max((_depth(g, n) for n in nodes_of(g, "pci_switch")), default=0)
    leaf_y = -(switch_rows + 1) * ROW
    nvswitch_y = leaf_y - ROW
    pos: Positions = {}
    cursor = 0.0

    def place(node: str) -> float:
        nonlocal cursor
        kids = below.get(node, [])
        if kids:
            x = sum(place(k) for k in kids) / len(kids)
        else:
            x, cursor = cursor, cursor + 1
        kind = g.nodes[node]["kind"]
        pos[node] = (x, 0.0 if kind == "cpu" else leaf_y if kind in ("gpu", "nic")
                     else -_depth(g, node) * ROW)
        return x

    for host in sorted(hosts(g), key=lambda h: g.nodes[h]["index"]):
        start = cursor
        for cpu in nodes_of(g, "cpu", host):
            place(cpu)
        switches = nodes_of(g, "nvswitch", host)
        width = max(cursor - start, len(switches))
        for k, sw in enumerate(switches):
            # Each in the middle of its share of the host's width.
            pos[sw] = (start + (k + 0.5) * width / len(switches) - 0.5, nvswitch_y)
        cursor = start + width + HOST_GAP
    return pos


# ---- Graphviz ----

def to_dot(g: nx.Graph) -> str:
    """The graph in DOT, hosts as clusters; node boxes the renderer's size."""
    w, h = NODE_WIDTH * UNIT_INCHES, NODE_HEIGHT * UNIT_INCHES
    # ordering=out keeps each node's children in bus order, as the grid does.
    lines = ["graph topology {", "  rankdir=TB; nodesep=0.12; ranksep=0.45; ordering=out;",
             f'  node [shape=box, fixedsize=true, width={w:.3f}, height={h:.3f}, label=""];']
    for host in hosts(g):
        members = [n for n, a in g.nodes(data=True) if a["host"] == host]
        lines.append(f'  subgraph "cluster_{host}" {{ ' +
                     " ".join(f'"{n}";' for n in members) + " }")
    lines.append(f'  "{NETWORK}";')
    for a, b, attrs in iter_edges(g):
        extra = " [constraint=false]" if attrs["kind"] == "inter_cpu" else ""
        lines.append(f'  "{a}" -- "{b}"{extra};')
    lines.append("}")
    return "\n".join(lines) + "\n"


def dot_layout(g: nx.Graph, dot: str) -> Positions:
    try:
        proc = subprocess.run([dot, "-Tplain"], input=to_dot(g), capture_output=True, text=True,
                              timeout=_DOT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LayoutError(f"{dot}: {e}; use --layout grid") from None
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["no message"])[0]
        raise LayoutError(f"{dot} failed (exit {proc.returncode}): {first}; use --layout grid")
    pos: Positions = {}
    for line in proc.stdout.splitlines():
        fields: Optional[list[str]] = shlex.split(line) if line.startswith("node ") else None
        if fields and len(fields) >= 4:
            pos[fields[1]] = (float(fields[2]) / UNIT_INCHES, float(fields[3]) / UNIT_INCHES)
    missing = [n for n, kind in g.nodes(data="kind") if n not in pos and kind != "host"]
    if missing:
        raise LayoutError(f"{dot} placed no {missing[0]}; use --layout grid")
    return pos
