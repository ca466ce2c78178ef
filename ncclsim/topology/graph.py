"""A networkx view of a cluster: hosts, CPUs (NUMA nodes), PCI switches, GPUs,
NICs, NVSwitches and the network joining the hosts' NICs.

Built from the cluster model (`from_cluster`) or from NCCL topology XML
(`ncclsim.topology.graph_xml`); `ncclsim.topology.graph_paths` finds paths and
their bottleneck. Node ids: `h<i>` (host), `h<i>/cpu<numa>`, `h<i>/sw<bus>`,
`h<i>/gpu<index>`, `h<i>/nic<index>`, `h<i>/nvsw<k>` and `net`. Every node has
`kind`, `label` and `host` (its host's id; None for the network); every edge
has `id` ("A--B", upstream or GPU end first), `kind` and `bandwidth_gbps`:
GB/s in one direction, None where unknown.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Literal, Optional

import networkx as nx

from ncclsim import NcclsimError
from ncclsim.cluster.model import Cluster, CpuSocket, Gpu, Host, Nic, PciSwitch
from ncclsim.platform.models import GpuCatalog, GpuModel, load_models
from ncclsim.platform.pci import PciAddress

NodeKind = Literal["host", "cpu", "pci_switch", "gpu", "nic", "nvswitch", "network"]
EdgeKind = Literal["pcie", "nvlink", "inter_cpu", "network"]
NETWORK = "net"

# Per NVLink, one direction, by NVLink generation (NVIDIA's product figures:
# H100 18 x 25 = 450 GB/s, A100 12 x 25 = 300 GB/s, B200 18 x 50 = 900 GB/s).
NVLINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
# Generation by compute capability, for GPUs not in gpu_models.json.
_SM_NVLINK_VERSION = ((100, 5), (90, 4), (80, 3), (70, 2), (60, 1))


class TopologyGraphError(NcclsimError, ValueError):
    """A topology that cannot be turned into a graph; the message names the file."""


# ---- node ids ----

def host_node(host: int) -> str:
    return f"h{host}"


def cpu_node(host: int, numa: int) -> str:
    return f"h{host}/cpu{numa}"


def switch_node(host: int, bus_id: PciAddress) -> str:
    # The bus alone is unique for the switches NCCL shows; device.function is
    # kept only when it says something (sibling ports of one switch).
    tail = "" if (bus_id.device, bus_id.function) == (0, 0) else \
        f".{bus_id.device:02x}.{bus_id.function:x}"
    return f"h{host}/sw{bus_id.bus:02x}{tail}"


def gpu_node(host: int, index: int) -> str:
    return f"h{host}/gpu{index}"


def nic_node(host: int, index: int) -> str:
    return f"h{host}/nic{index}"


def nvswitch_node(host: int, index: int) -> str:
    return f"h{host}/nvsw{index}"


# ---- bandwidths (GB/s, one direction) ----

_SPEED = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s")


def pcie_gbps(link_speed: Optional[str], link_width: Optional[int]) -> Optional[float]:
    """Raw rate after line coding: 8b/10b up to Gen2, 128b/130b for Gen3-5,
    FLIT (242/256) for Gen6. NCCL's own estimate is lower (Gen5 x16: 48)."""
    m = _SPEED.match(link_speed or "")
    if not m or not link_width:
        return None
    gts = float(m.group(1))
    coding = 0.8 if gts <= 5.0 else 128 / 130 if gts <= 32.0 else 242 / 256
    return round(gts * link_width * coding / 8, 2)


def nvlink_version(model: Optional[GpuModel], sm: Optional[int]) -> Optional[int]:
    if model is not None and model.nvlink_version:
        return model.nvlink_version
    for min_sm, version in _SM_NVLINK_VERSION:
        if sm is not None and sm >= min_sm:
            return version
    return None


def nvlink_gbps(version: Optional[int]) -> Optional[float]:
    return NVLINK_GBPS.get(version) if version else None


def inter_cpu_gbps(arch: str, vendor: str, family: int, model: int) -> Optional[float]:
    """NCCL's estimate of the socket interconnect (src/graph/topo.h, topo.cc)."""
    if arch == "ppc64":
        return 32.0
    if arch == "arm64":
        return 6.0
    if vendor == "GenuineIntel":
        return 40.0 if model >= 0xCF else 22.0 if model >= 0x8F else 10.0 if model >= 0x55 else 6.0
    if vendor == "AuthenticAMD":
        return 32.0 if family >= 0x1A else 24.0 if family >= 0x19 else 16.0
    return None


def nic_gbps(speed_mbps: Optional[int]) -> Optional[float]:
    return speed_mbps / 8000 if speed_mbps else None


# ---- building blocks (shared by the cluster and XML readers) ----

def new_graph(name: str) -> nx.Graph:
    g = nx.Graph(name=name)
    g.add_node(NETWORK, kind="network", label="network", host=None)
    return g


def add_node(g: nx.Graph, node: str, kind: NodeKind, label: str, host: Optional[str],
             **attrs: Any) -> str:
    if node in g:
        raise TopologyGraphError(f"{node}: two devices with the same id")
    g.add_node(node, kind=kind, label=label, host=host, **attrs)
    return node


def add_link(g: nx.Graph, a: str, b: str, kind: EdgeKind, bandwidth_gbps: Optional[float],
             **attrs: Any) -> None:
    g.add_edge(a, b, id=f"{a}--{b}", kind=kind, bandwidth_gbps=bandwidth_gbps, **attrs)


def add_nvlinks(g: nx.Graph, gpu: str, target: str, count: int,
                link_gbps: Optional[float]) -> None:
    """One edge per GPU-target pair. Both GPUs of a direct GPU-GPU link list
    the same physical links, so the edge keeps the larger count, not the sum."""
    if g.has_edge(gpu, target):
        existing = g.edges[gpu, target]
        if existing["kind"] != "nvlink":  # a GPU right below the CPU it has NVLinks to
            existing["nvlinks"] = count
            return
        count = max(count, existing["count"])
        g.remove_edge(gpu, target)
        gpu, target = sorted((gpu, target), key=_node_order(g))
    add_link(g, gpu, target, "nvlink", link_gbps * count if link_gbps else None,
             count=count, link_gbps=link_gbps)


def _node_order(g: nx.Graph) -> Any:
    order = {n: i for i, n in enumerate(g.nodes)}
    return lambda n: order[n]


def connect_cpus(g: nx.Graph, cpus: list[str], bandwidth_gbps: Optional[float]) -> None:
    """NCCL links every pair of NUMA nodes of a host directly."""
    for i, a in enumerate(cpus):
        for b in cpus[i + 1:]:
            add_link(g, a, b, "inter_cpu", bandwidth_gbps)


def join_network(g: nx.Graph) -> None:
    """Every NIC to the one network node, at the NIC's port speed."""
    for nic in nodes_of(g, "nic"):
        attrs = g.nodes[nic]
        add_link(g, nic, NETWORK, "network", attrs.get("bandwidth_gbps"),
                 speed_mbps=attrs.get("speed_mbps"))


def nodes_of(g: nx.Graph, kind: NodeKind, host: Optional[str] = None) -> list[str]:
    """Nodes of one kind (of one host), in the order they were added."""
    return [n for n, a in g.nodes(data=True)
            if a["kind"] == kind and (host is None or a["host"] == host)]


def hosts(g: nx.Graph) -> list[str]:
    return nodes_of(g, "host")


def gpu_label(index: int, model: Optional[GpuModel], nvlinks: int) -> str:
    name = model.key.upper() if model else "GPU"
    return f"GPU{index}\n{name}" + (f" {nvlinks}xNVL" if nvlinks else "")


def nic_label(name: str, speed_mbps: Optional[int]) -> str:
    return f"{name}\n{speed_mbps / 1000:g}G" if speed_mbps else name


# ---- from the cluster model ----

def from_cluster(cluster: Cluster, catalog: Optional[GpuCatalog] = None) -> nx.Graph:
    catalog = catalog or load_models()
    g = new_graph(cluster.preset)
    for host in cluster.hosts:
        _add_cluster_host(g, host, catalog)
    join_network(g)
    return g


def _add_cluster_host(g: nx.Graph, host: Host, catalog: GpuCatalog) -> None:
    h = host.index
    hid = add_node(g, host_node(h), "host", host.hostname, None, index=h,
                   hostname=host.hostname, nccl_host_id=host.host_id)
    nvsw = {s.bus_id: nvswitch_node(h, k) for k, s in enumerate(sorted(host.nvswitches,
                                                                        key=lambda s: s.bus_id))}
    for bus_id, node in nvsw.items():
        add_node(g, node, "nvswitch", f"NVSwitch\n{bus_id.bus:02x}", hid, bus_id=str(bus_id))
    cpus = []
    for socket in host.sockets:
        cpus.append(_add_socket(g, host, socket))
        for child in socket.children:
            _add_device(g, host, host.device(child), cpus[-1], catalog)
    connect_cpus(g, cpus, _socket_gbps(host.sockets[0]) if host.sockets else None)
    gpus = {gpu.bus_id: gpu_node(h, gpu.index) for gpu in host.gpus}
    for gpu in host.gpus:
        per_link = nvlink_gbps(nvlink_version(catalog.get(gpu.model), gpu.sm))
        for link in gpu.nvlinks:
            target = nvsw.get(link.target) or gpus.get(link.target)
            if target is not None:
                add_nvlinks(g, gpus[gpu.bus_id], target, link.count, per_link)


def _socket_gbps(s: CpuSocket) -> Optional[float]:
    return inter_cpu_gbps(s.arch, s.vendor, s.family_id, s.model_id)


def _add_socket(g: nx.Graph, host: Host, s: CpuSocket) -> str:
    return add_node(g, cpu_node(host.index, s.numa_id), "cpu",
                    f"CPU{s.numa_id}\n{_vendor_short(s.vendor)}", host_node(host.index),
                    numa_id=s.numa_id, arch=s.arch, vendor=s.vendor, family_id=s.family_id,
                    model_id=s.model_id, affinity=s.affinity)


def _vendor_short(vendor: str) -> str:
    return {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(vendor, vendor or "CPU")


def _add_device(g: nx.Graph, host: Host, dev: Any, parent: str, catalog: GpuCatalog) -> None:
    h, hid = host.index, host_node(host.index)
    link_bw = pcie_gbps(dev.link.speed, dev.link.width)
    link = {"link_speed": dev.link.speed, "link_width": dev.link.width}
    if isinstance(dev, PciSwitch):
        node = add_node(g, switch_node(h, dev.bus_id), "pci_switch",
                        f"PCIe switch\n{dev.bus_id.bus:02x}", hid, bus_id=str(dev.bus_id),
                        parent=parent, bandwidth_gbps=link_bw, **link)
        add_link(g, parent, node, "pcie", link_bw, **link)
        for child in dev.children:
            _add_device(g, host, host.device(child), node, catalog)
    elif isinstance(dev, Gpu):
        label = gpu_label(dev.index, catalog.get(dev.model), dev.nvlink_count)
        node = add_node(g, gpu_node(h, dev.index), "gpu", label, hid,
                        index=dev.index, bus_id=str(dev.bus_id), model=dev.model, sm=dev.sm,
                        nvlinks=dev.nvlink_count, uuid=dev.uuid, parent=parent, **link)
        add_link(g, parent, node, "pcie", link_bw, **link)
    elif isinstance(dev, Nic):
        node = add_node(g, nic_node(h, dev.index), "nic", nic_label(dev.name, dev.speed_mbps),
                        hid, index=dev.index, name=dev.name, bus_id=str(dev.bus_id),
                        speed_mbps=dev.speed_mbps, bandwidth_gbps=nic_gbps(dev.speed_mbps),
                        transport=dev.transport, parent=parent, **link)
        add_link(g, parent, node, "pcie", link_bw, **link)


def iter_edges(g: nx.Graph) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Edges as (first, second, attributes), the ends in the order of the edge id."""
    for _, _, attrs in g.edges(data=True):
        a, b = attrs["id"].split("--")
        yield a, b, attrs
