"""Rings and trees of a communicator, rebuilt from every rank's view and checked.

Each rank logs only its own neighbours (`Ring 00 : prev -> r -> next`,
`Trees [0] children->r->parent`); rank 0 also logs each ring whole
(`Channel 00/02 : 0 7 6 ...`). Rebuilding from the neighbours and comparing
with rank 0's line catches a log that is missing, cut short, or from another run.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from ncclsim.report import parse_log as pl
from ncclsim.report.model import Check, TreeNode


def walk_ring(next_of: Mapping[int, int], start: int, limit: int) -> list[int]:
    """Ranks from `start` following `next` until the ring closes or breaks."""
    order = [start]
    cur = next_of.get(start)
    while cur is not None and cur != start and cur not in order and len(order) <= limit:
        order.append(cur)
        cur = next_of.get(cur)
    return order


def _ring_problem(order: Sequence[int], next_of: Mapping[int, int], prev_of: Mapping[int, int],
                  nranks: int) -> Optional[str]:
    missing = sorted(set(range(nranks)) - set(order))
    if missing:
        return f"ranks {missing} not on the ring"
    if len(order) != nranks or next_of.get(order[-1]) != order[0]:
        return "ring does not close"
    bad = [r for r in order if prev_of.get(next_of[r]) != r]
    if bad:
        return f"prev/next disagree at ranks {bad}"
    return None


def same_cycle(a: Sequence[int], b: Sequence[int]) -> bool:
    if len(a) != len(b) or not a:
        return len(a) == len(b)
    if a[0] not in b:
        return False
    i = list(b).index(a[0])
    return list(a) == list(b[i:]) + list(b[:i])


def _agrees(order: Sequence[int], shown: Sequence[int], nranks: int) -> bool:
    """Rank 0's Channel line shows the ring `order` walks. NCCL cuts that line
    at 128 characters (dumpLine in graph/rings.cc; without its "..." when the
    cut falls on the last position), so a line of fewer ranks is the ring's
    start from rank 0."""
    if len(shown) >= nranks or not shown or shown[0] not in order:
        return same_cycle(order, shown)
    i = list(order).index(shown[0])
    return (list(order[i:]) + list(order[:i]))[:len(shown)] == list(shown)


def build_rings(links: Mapping[int, Sequence[pl.RingLink]], orders: Mapping[int, pl.RingOrder],
                nranks: Optional[int]) -> tuple[dict[int, tuple[int, ...]], list[Check]]:
    """Rings per channel from the per-rank links (rank 0's whole-ring line where links
    are missing), with checks that each covers every rank once and agrees with rank 0."""
    rings: dict[int, tuple[int, ...]] = {}
    broken: list[str] = []
    disagree: list[str] = []
    for channel in sorted(set(links) | set(orders)):
        ring_links = links.get(channel, ())
        order0 = orders.get(channel)
        if ring_links and nranks:
            next_of = {lk.rank: lk.next for lk in ring_links}
            prev_of = {lk.rank: lk.prev for lk in ring_links}
            start = 0 if 0 in next_of else min(next_of)
            order = walk_ring(next_of, start, nranks)
            problem = _ring_problem(order, next_of, prev_of, nranks)
            if problem:
                broken.append(f"channel {channel}: {problem}")
            if order0 is not None and not _agrees(order, order0.ranks, nranks):
                disagree.append(f"channel {channel}")
            rings[channel] = tuple(order) if not problem or order0 is None else order0.ranks
        elif order0 is not None:
            rings[channel] = order0.ranks
            if nranks and sorted(order0.ranks) != list(range(nranks)):
                broken.append(f"channel {channel}: rank 0's ring does not hold every rank once")
    checks = []
    if rings:
        checks.append(Check("rings cover every rank once", not broken,
                            "; ".join(broken) or f"{len(rings)} channel(s)"))
    if orders and links:
        checks.append(Check("rings agree with rank 0's Channel lines", not disagree,
                            ("differ on " + ", ".join(disagree)) if disagree else ""))
    return rings, checks


def _node(link: pl.TreeLink) -> TreeNode:
    return TreeNode(up=link.up if link.up >= 0 else None, down=tuple(link.down))


def _tree_problem(nodes: Mapping[int, TreeNode], nranks: int) -> Optional[str]:
    missing = sorted(set(range(nranks)) - set(nodes))
    if missing:
        return f"ranks {missing} have no tree entry"
    roots = [r for r, n in nodes.items() if n.up is None]
    if len(roots) != 1:
        return f"{len(roots)} roots {roots}"
    for r, n in nodes.items():
        if n.up is not None and r not in nodes.get(n.up, TreeNode(None, ())).down:
            return f"rank {r} names parent {n.up}, which does not list it as a child"
        for c in n.down:
            if nodes.get(c, TreeNode(None, ())).up != r:
                return f"rank {r} names child {c}, whose parent is not {r}"
    reached, todo = set(), [roots[0]]
    while todo:
        r = todo.pop()
        if r not in reached:
            reached.add(r)
            todo.extend(nodes[r].down)
    if len(reached) != nranks:
        return f"ranks {sorted(set(nodes) - reached)} not reachable from root {roots[0]}"
    return None


def build_trees(trees: Mapping[int, Mapping[int, pl.TreeLink]], tree_lines: Mapping[int, Mapping[int, pl.TreeLink]],
                nranks: Optional[int]) -> tuple[dict[int, dict[int, TreeNode]], list[Check]]:
    """Trees per channel ({rank: parent/children}) from the `Trees` lines, the
    `Tree c :` lines (2.2x+) filling gaps, checked for one root and consistent links."""
    result: dict[int, dict[int, TreeNode]] = {}
    disagree: list[str] = []
    for channel in sorted(set(trees) | set(tree_lines)):
        a, b = trees.get(channel, {}), tree_lines.get(channel, {})
        nodes = {r: _node(lk) for r, lk in b.items()}
        nodes.update({r: _node(lk) for r, lk in a.items()})
        disagree += [f"channel {channel} rank {r}" for r in set(a) & set(b) if _node(a[r]) != _node(b[r])]
        result[channel] = dict(sorted(nodes.items()))
    checks = []
    if result and nranks:
        problems = [f"channel {c}: {p}" for c, nodes in result.items() if (p := _tree_problem(nodes, nranks))]
        checks.append(Check("trees cover every rank with one root", not problems,
                            "; ".join(problems) or f"{len(result)} channel(s)"))
    if trees and tree_lines:
        checks.append(Check("Trees and Tree lines agree", not disagree, ", ".join(disagree[:10])))
    return result, checks
