"""A run directory as a topology graph with NCCL's rings and trees laid over it.

The hosts are the topology files the run gave NCCL (`hosts/h<i>/topo.xml`,
written by `ncclsim launch`); a run directory without them (NCCL output of
another launcher) uses NCCL's topology dump of rank 0's host for every host.
Rings, trees and the NIC of each connection come from the report (`run.json`,
or the logs when it is missing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import networkx as nx

from ncclsim import NcclsimError
from ncclsim.platform.models import GpuCatalog
from ncclsim.report import parse_log as pl
from ncclsim.report.build import build_report
from ncclsim.rundir import TOPO_DUMP, RunDir
from ncclsim.topology.drawing import Segment
from ncclsim.topology.graph import NETWORK, nic_node
from ncclsim.topology.graph_paths import nearest_nic
from ncclsim.report.run_hosts import host_files, hosts_graph, rank_gpus



class RunViewError(NcclsimError):
    """A run directory whose report or topology cannot be read."""


@dataclass(frozen=True)
class RunView:
    graph: nx.Graph
    report: Mapping[str, Any]  # run.json's document
    rank_gpu: Mapping[int, str]  # rank -> GPU node
    rings: Mapping[int, tuple[int, ...]]
    trees: Mapping[int, Mapping[int, tuple[Optional[int], tuple[int, ...]]]]  # rank -> (up, down)
    nic_dev: Mapping[tuple[int, int, int], int]  # (channel, src, dst) -> NIC index NCCL logged
    notes: tuple[str, ...]

    def segments(self, algorithm: str, channels: Sequence[int]) -> list[Segment]:
        hops: list[tuple[int, int, int]] = []
        for c in channels:
            if algorithm == "ring":
                order = self.rings.get(c, ())
                hops += [(c, a, b) for a, b in zip(order, order[1:] + order[:1]) if a != b]
            else:
                tree = self.trees.get(c, {})
                hops += [(c, rank, child) for rank, (_, down) in sorted(tree.items())
                         for child in down]
        return [Segment(algorithm, c, a, b, self.hop_path(c, a, b)) for c, a, b in hops
                if a in self.rank_gpu and b in self.rank_gpu]

    def hop_path(self, channel: int, a: int, b: int) -> tuple[str, ...]:
        ga, gb = self.rank_gpu[a], self.rank_gpu[b]
        if self.graph.nodes[ga]["host"] == self.graph.nodes[gb]["host"]:
            return (ga, gb)
        dev = self.nic_dev.get((channel, a, b), self.nic_dev.get((channel, b, a)))
        return (ga, *self._nic(ga, dev), NETWORK, *self._nic(gb, dev), gb)

    def _nic(self, gpu: str, dev: Optional[int]) -> tuple[str, ...]:
        """The NIC NCCL logged (same index on both hosts, as its graph search
        gives symmetric hosts), else the one nearest the GPU."""
        host = self.graph.nodes[gpu]["host"]
        if dev is not None:
            node = nic_node(int(host[1:]), dev)
            if node in self.graph:
                return (node,)
        nic = nearest_nic(self.graph, gpu)
        return (nic,) if nic else ()


def is_run_dir(path: Path) -> bool:
    """What `launch` writes (launch.json, run.json), or NCCL's graph dump and logs."""
    return RunDir(path).is_launch_run() or \
        any(path.glob("graph*.xml")) or any(path.glob("*.log"))


def load_run(run_dir: Path, catalog: GpuCatalog) -> RunView:
    report = _report(run_dir)
    host_ids = [h for h in report.get("hosts") or [] if isinstance(h, str)]
    graph = _graph(run_dir, max(len(host_ids), _launch_hosts(report), 1), host_ids, catalog)
    notes: list[str] = []
    rank_gpu = rank_gpus(graph, report.get("ranks") or [], host_ids, notes)
    for rank, gpu in rank_gpu.items():
        graph.nodes[gpu]["rank"] = rank
        graph.nodes[gpu]["label"] += f"\nrank {rank}"
    rings = {int(c): tuple(r) for c, r in (report.get("rings") or {}).items()}
    trees = {int(c): {int(r): (n.get("up"), tuple(n.get("down") or ())) for r, n in nodes.items()}
             for c, nodes in (report.get("trees") or {}).items()}
    if not rings:
        notes.append("the report has no rings (did NCCL initialise?)")
    return RunView(graph, report, rank_gpu, rings, trees, _nic_devs(report), tuple(notes))


def _report(run_dir: Path) -> dict[str, Any]:
    path = RunDir(run_dir).run_json
    if not path.is_file():
        return build_report(run_dir).to_json()
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RunViewError(f"{path}: not readable as a report ({e}); rebuild it with "
                           f"`ncclsim report {run_dir}`") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("ranks"), list):
        raise RunViewError(f"{path}: not an ncclsim report (no ranks); rebuild it with "
                           f"`ncclsim report {run_dir}`")
    return doc


def _launch_hosts(report: Mapping[str, Any]) -> int:
    """The simulated hosts launched (the report carries launch.json)."""
    hosts = (report.get("launch") or {}).get("hosts")
    return hosts if isinstance(hosts, int) else 0


def _graph(run_dir: Path, nhosts: int, host_ids: list[str], catalog: GpuCatalog) -> nx.Graph:
    files = host_files(run_dir, nhosts)
    if files is None:
        run = RunDir(run_dir)
        raise RunViewError(f"{run_dir}: no topology to draw: neither {run.host('<i>').topo_xml.relative_to(run_dir)} "
                           f"nor NCCL's dump ({TOPO_DUMP}; set NCCL_TOPO_DUMP_FILE)")
    return hosts_graph(files, host_ids, catalog)


def _nic_devs(report: Mapping[str, Any]) -> dict[tuple[int, int, int], int]:
    devs = {}
    for c in report.get("connections") or []:
        via = str(c.get("via", ""))
        dev = pl.parse_via(via).net_dev if via.startswith("NET/") else None
        if dev is not None and isinstance(c.get("to"), int):
            devs[(int(c["channel"]), int(c["from"]), int(c["to"]))] = dev
    return devs

