"""The hosts of a run directory as a topology graph, and its ranks' GPUs in it.

Shared by the picture of a run (`run_view`) and the report (`ncclsim.report.nics`),
so both place a rank on the same GPU node. Nothing here reads the report: ranks
come in as `run.json`'s rank entries (host, busid, device).

The hosts are the topology files the run gave NCCL (`hosts/h<i>/topo.xml`,
written by `ncclsim launch`); a run directory without them (NCCL output of
another launcher) uses NCCL's topology dump of rank 0's host for every host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import networkx as nx

from ncclsim.platform.models import GpuCatalog
from ncclsim.platform.pci import PciAddress, PciFormatError
from ncclsim.report.dumps import find_dump
from ncclsim.rundir import RunDir, host_index as simulated_host_index
from ncclsim.topology.graph import gpu_node, nodes_of
from ncclsim.topology.graph_xml import from_xml_files


def host_files(run_dir: Path, nhosts: int) -> Optional[list[Path]]:
    """One topology file per host: the run's own, else NCCL's dump repeated;
    None when there is neither."""
    files = [RunDir(run_dir).host(i).topo_xml for i in range(nhosts)]
    if all(f.is_file() for f in files):
        return files
    dump = find_dump(run_dir, "topo")
    return None if dump is None else [dump] * nhosts


def hosts_graph(files: Sequence[Path], host_ids: Sequence[str], catalog: GpuCatalog) -> nx.Graph:
    """The hosts joined by the network, labelled by the report's host ids (h<i> beyond them).
    Raises TopologyGraphError for a file that cannot be read."""
    labels = [host_ids[i] if i < len(host_ids) else f"h{i}" for i in range(len(files))]
    return from_xml_files(files, catalog, labels)


def host_index(host: Any, host_ids: Sequence[str], nhosts: int) -> Optional[int]:
    i = simulated_host_index(host)
    if i is not None and i < nhosts:
        return i
    return list(host_ids).index(host) if host in host_ids else None


def rank_gpus(g: nx.Graph, ranks: Iterable[Mapping[str, Any]], host_ids: Sequence[str],
              notes: list[str]) -> dict[int, str]:
    """Rank -> GPU node, by the rank's host and PCI bus id (the domain differs
    between the run's hosts and a dump repeated for all of them), else its device.
    A rank that cannot be placed is left out, with a note."""
    nhosts = len(nodes_of(g, "host"))
    mapping: dict[int, str] = {}
    for r in ranks:
        h = host_index(r.get("host"), host_ids, nhosts)
        if h is None:
            notes.append(f"rank {r.get('rank')}: host {r.get('host')!r} not in the topology")
            continue
        node = gpu_by_bus(g, h, r.get("busid"))
        if node is None and isinstance(r.get("device"), int) and gpu_node(h, r["device"]) in g:
            node = gpu_node(h, r["device"])
        if node is None:
            notes.append(f"rank {r.get('rank')}: no GPU {r.get('busid')} on host h{h}")
        else:
            mapping[int(r["rank"])] = node
    return mapping


def gpu_by_bus(g: nx.Graph, host: int, busid: Any) -> Optional[str]:
    try:
        want = PciAddress.parse(str(busid))
    except PciFormatError:
        return None
    for node in nodes_of(g, "gpu", f"h{host}"):
        have = g.nodes[node].get("bus_id")
        if have and _bdf(PciAddress.parse(have)) == _bdf(want):
            return node
    return None


def _bdf(a: PciAddress) -> tuple[int, int, int]:
    return (a.bus, a.device, a.function)
