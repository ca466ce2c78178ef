"""NCCL topology XML to the graph of `ncclsim.topology.graph`: a host file
ncclsim wrote, a hand-written one, or NCCL's own dump
(`<system><cpu><pci>..<gpu><nvlink/></gpu>..<nic><net/></nic>`).

Read leniently, as a picture needs less than NCCL does (`topo validate`
checks a file NCCL will read); what cannot be read is named by file and line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import networkx as nx
from lxml import etree

from ncclsim.platform.models import GpuCatalog, GpuModel, load_models
from ncclsim.platform.pci import PciAddress, PciFormatError
from ncclsim.topology.graph import (
    TopologyGraphError, add_link, add_node, add_nvlinks, connect_cpus, cpu_node, gpu_label,
    gpu_node, host_node, inter_cpu_gbps, join_network, new_graph, nic_gbps, nic_label, nic_node,
    nvlink_gbps, nvlink_version, nvswitch_node, pcie_gbps, switch_node)
from ncclsim.topology.validate import BRIDGE_CLASSES, INVISIBLE_NVLINK_TARGET, is_bus_id

NVSWITCH_TCLASS = "0x068000"
CPU_TCLASS = "0x068001"


def read_xml(path: Path) -> "etree._Element":
    """The <system> element of a topology file; errors name the file (and line)."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    try:
        root = etree.parse(str(path), parser).getroot()
    except OSError as e:
        raise TopologyGraphError(f"{path}: cannot read: {e}") from None
    except etree.XMLSyntaxError as e:
        raise TopologyGraphError(f"{path}:{e.lineno}: not well-formed XML: {e.msg}") from None
    if root.tag != "system":
        raise TopologyGraphError(f"{path}: expected an NCCL topology (<system> at the top), "
                                 f"found <{root.tag}>")
    return root


def from_xml_files(paths: Sequence[Path], catalog: Optional[GpuCatalog] = None,
                   labels: Optional[Sequence[str]] = None) -> nx.Graph:
    """One host per file, in order, joined by the network."""
    catalog = catalog or load_models()
    g = new_graph(paths[0].name if len(paths) == 1 else paths[0].parent.name)
    for i, path in enumerate(paths):
        add_xml_host(g, read_xml(path), i, str(path), catalog,
                     labels[i] if labels is not None else None)
    join_network(g)
    return g


def add_xml_host(g: nx.Graph, root: "etree._Element", host: int, source: str,
                 catalog: GpuCatalog, label: Optional[str] = None) -> None:
    _HostReader(g, host, source, catalog).read(root, label)


def _model_by_device_id(catalog: GpuCatalog, device: Optional[str]) -> Optional[GpuModel]:
    try:
        wanted = int(device or "", 16)
    except ValueError:
        return None
    return next((m for m in catalog if m.pci_device_id == wanted), None)


class _HostReader:
    def __init__(self, g: nx.Graph, host: int, source: str, catalog: GpuCatalog) -> None:
        self.g, self.h, self.hid = g, host, host_node(host)
        self.source, self.catalog = source, catalog
        # (gpu node, its cpu, <nvlink> element, per-link GB/s), resolved once every GPU is known
        self.nvlinks: list[tuple[str, str, "etree._Element", Optional[float]]] = []
        self.gpu_by_bus: dict[str, str] = {}

    def error(self, el: "etree._Element", msg: str) -> TopologyGraphError:
        return TopologyGraphError(f"{self.source}:{el.sourceline}: <{el.tag}>: {msg}")

    def int_attr(self, el: "etree._Element", name: str) -> Optional[int]:
        value = el.get(name)
        if value is None:
            return None
        try:
            return int(value, 0)
        except ValueError:
            raise self.error(el, f"{name}={value!r} is not an integer") from None

    def busid(self, el: "etree._Element") -> PciAddress:
        value = el.get("busid")
        if value is None:
            raise self.error(el, "no busid attribute")
        try:
            return PciAddress.parse(value)
        except PciFormatError as e:
            raise self.error(el, f"busid: {e}") from None

    def read(self, root: "etree._Element", label: Optional[str]) -> None:
        name = root.get("name", "")
        label = label or (name.rsplit("/", 1)[-1] if name else self.hid)
        add_node(self.g, self.hid, "host", label, None, index=self.h, hostname=label)
        cpus: list[str] = []
        for pos, cpu in enumerate(root.findall("cpu")):
            cpus.append(self.cpu(cpu, pos, cpus))
            for child in cpu:
                self.device(child, cpus[-1], cpus[-1])
        first = root.find("cpu")
        connect_cpus(self.g, cpus, None if first is None else inter_cpu_gbps(
            first.get("arch", ""), first.get("vendor", ""),
            self.int_attr(first, "familyid") or 0, self.int_attr(first, "modelid") or 0))
        self.resolve_nvlinks()

    def cpu(self, el: "etree._Element", pos: int, taken: list[str]) -> str:
        numa = self.int_attr(el, "numaid")
        # NCCL's dump may say -1 (unknown); the position still tells sockets apart.
        if numa is None or numa < 0 or cpu_node(self.h, numa) in taken:
            numa = pos
        vendor = el.get("vendor", "")
        short = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(vendor, vendor or "CPU")
        return add_node(self.g, cpu_node(self.h, numa), "cpu", f"CPU{numa}\n{short}", self.hid,
                        numa_id=numa, arch=el.get("arch"), vendor=vendor or None,
                        family_id=self.int_attr(el, "familyid"),
                        model_id=self.int_attr(el, "modelid"), affinity=el.get("affinity"))

    def device(self, el: "etree._Element", parent: str, cpu: str) -> None:
        if el.tag == "nic":  # a NIC on no PCI device (NCCL's dump of a socket NIC)
            self.nics(el, parent, None, {})
        elif el.tag == "pci":
            self.pci(el, parent, cpu)

    def pci(self, el: "etree._Element", parent: str, cpu: str) -> None:
        bus_id = self.busid(el)
        width = self.int_attr(el, "link_width")
        link = {"link_speed": el.get("link_speed"), "link_width": width}
        bw = pcie_gbps(el.get("link_speed"), width)
        gpu, nic = el.find("gpu"), el.find("nic")
        if gpu is not None:
            self.gpu(el, gpu, bus_id, parent, cpu, link, bw)
        elif nic is not None:
            self.nics(nic, parent, bus_id, link, bw)
        elif el.get("class") in BRIDGE_CLASSES or el.find("pci") is not None:
            node = add_node(self.g, switch_node(self.h, bus_id), "pci_switch",
                            f"PCIe switch\n{bus_id.bus:02x}", self.hid, bus_id=str(bus_id),
                            parent=parent, bandwidth_gbps=bw, **link)
            add_link(self.g, parent, node, "pcie", bw, **link)
            for child in el:
                self.device(child, node, cpu)
        # Anything else is a PCI device NCCL does not use: not drawn.

    def gpu(self, pci: "etree._Element", el: "etree._Element", bus_id: PciAddress, parent: str,
            cpu: str, link: dict[str, Any], bw: Optional[float]) -> None:
        index = self.int_attr(el, "dev")
        if index is None:
            raise self.error(el, "no dev attribute (the GPU's index on the host)")
        model = _model_by_device_id(self.catalog, pci.get("device"))
        sm = self.int_attr(el, "sm")
        links = el.findall("nvlink")
        count = sum(self.int_attr(n, "count") or 0 for n in links)
        node = gpu_node(self.h, index)
        if node in self.g:
            raise self.error(el, f"dev={index}: two GPUs with the same dev")
        add_node(self.g, node, "gpu", gpu_label(index, model, count), self.hid, index=index,
                 bus_id=str(bus_id), model=model.key if model else None, sm=sm, nvlinks=count,
                 parent=parent, **link)
        add_link(self.g, parent, node, "pcie", bw, **link)
        self.gpu_by_bus[str(bus_id)] = node
        per_link = nvlink_gbps(nvlink_version(model, sm))
        self.nvlinks += [(node, cpu, n, per_link) for n in links]

    def nics(self, nic: "etree._Element", parent: str, bus_id: Optional[PciAddress],
             link: dict[str, Any], bw: Optional[float] = None) -> None:
        for net in nic.findall("net"):
            index = self.int_attr(net, "dev")
            if index is None:
                raise self.error(net, "no dev attribute (the NIC's index on the host)")
            name = net.get("name", f"nic{index}")
            speed = self.int_attr(net, "speed")
            node = nic_node(self.h, index)
            if node in self.g:
                raise self.error(net, f"dev={index}: two NICs with the same dev")
            add_node(self.g, node, "nic", nic_label(name, speed), self.hid, index=index, name=name,
                     bus_id=str(bus_id) if bus_id else None, speed_mbps=speed,
                     bandwidth_gbps=nic_gbps(speed), parent=parent, **link)
            add_link(self.g, parent, node, "pcie", bw, **link)

    def resolve_nvlinks(self) -> None:
        switches = sorted({n.get("target", "") for _, _, n, _ in self.nvlinks
                           if n.get("tclass") == NVSWITCH_TCLASS
                           or n.get("target") == INVISIBLE_NVLINK_TARGET})
        nvsw = {t: nvswitch_node(self.h, k) for k, t in enumerate(switches)}
        for bus, node in nvsw.items():
            # NCCL's dump names NVSwitches it cannot see with a fake bus id.
            invisible = not is_bus_id(bus)
            add_node(self.g, node, "nvswitch", "NVSwitch\n" + ("(NCCL)" if invisible else bus[5:7]),
                     self.hid, bus_id=None if invisible else bus)
        for gpu, cpu, el, per_link in self.nvlinks:
            target_bus = el.get("target", "")
            count = self.int_attr(el, "count") or 0
            target = cpu if el.get("tclass") == CPU_TCLASS else \
                nvsw.get(target_bus) or self.gpu_by_bus.get(target_bus)
            # A GPU missing from the file (a host cut to fewer GPUs) has no link to draw.
            if target is not None and count > 0 and target != gpu:
                add_nvlinks(self.g, gpu, target, count, per_link)
