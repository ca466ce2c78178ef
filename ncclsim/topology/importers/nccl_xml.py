"""Read an NCCL topology XML: NCCL's own dump (NCCL_TOPO_DUMP_FILE) or a
hand-written NCCL_TOPO_FILE such as cloud providers publish.

NCCL reads such files leniently (a hand-written one gives only what NCCL
cannot find in /sys, CPUID or NVML), so this reader does too: what NCCL would
have asked the machine for is taken from the reference preset of the GPU
model, with a note. What cannot be decided (no XML, not a topology, a GPU of
unknown model) is one error naming the file, line, element and attribute.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Optional, TypeVar

from lxml import etree

from ncclsim.cluster.model import PCIE_LINK_SPEEDS, PciIdentity, PciLink
from ncclsim.platform.models import GpuCatalog
from ncclsim.platform.pci import PciAddress, PciFormatError
from ncclsim.rundir import TOPO_DUMP
from ncclsim.topology.importers.raw import (
    Key, Notes, RawCpu, RawGpu, RawHost, RawNic, RawNode, RawSocket, RawSwitch,
    TopoImportError, walk)
from ncclsim.topology.importers.reference import (
    NVIDIA_VENDOR, Reference, model_by_device, model_by_sm, most_common, nvswitch_split,
    reference_for)

T = TypeVar("T")

# NCCL matches a class by prefix (kvDictPciClass): "0x03" is any display controller.
BRIDGE_CLASSES = ("0x060400", "0x080100")  # PCI switch; ConnectX-8 "data direct"
GPU_CLASSES = ("0x03", "0x120000")
NIC_CLASS = "0x02"
IB_CLASS, ETHERNET_CLASS = "0x0207", "0x0200"
NVSWITCH_TCLASS, GPU_TCLASS = "0x068000", "0x03"
INVISIBLE_NVSWITCH = "fffffff:ffff:ff"  # NCCL's target for an NVSwitch it cannot see
INVISIBLE_KEY: Key = (0x10000,)  # sorts after every real bus id
ASSUMED_NVSWITCH = 0x10001  # keys (ASSUMED_NVSWITCH, i) for an assumed fabric
ID_ATTRS = ("vendor", "device", "subsystem_vendor", "subsystem_device")
_CPUMASK = re.compile(r"^[0-9a-f]{1,8}(,[0-9a-f]{8})*$")
_TRAILING_NUMBER = re.compile(r"(\d+)$")
_GT_S = re.compile(r"^\s*([0-9.]+)\s*GT/s")
GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
NCCL_DEFAULT_GEN = 3  # what NCCL assumes for a speed it does not know
NCCL_DEFAULT_WIDTH = 16
# Attributes the spec keeps, that NCCL replaces itself on reading (host_hash,
# rank, mlopart), that name a device as the PCI domain does (a NIC's guid: every
# simulated NIC has one of its own, unique in the cluster), or NCCL's own marks
# (net="1"). Any other is noted, unless its value is the simulation's (SIMULATED).
READ_ATTRS: dict[str, frozenset[str]] = {
    "system": frozenset({"version", "name"}),
    "cpu": frozenset({"numaid", "affinity", "arch", "vendor", "familyid", "modelid", "host_hash"}),
    "pci": frozenset({"busid", "class", *ID_ATTRS, "link_speed", "link_width"}),
    "gpu": frozenset({"dev", "sm", "rank", "mlopart"}),
    "nvlink": frozenset({"target", "count", "tclass"}),
    "nic": frozenset(),
    "net": frozenset({"name", "dev", "speed", "port", "latency", "maxconn", "gdr", "coll", "guid",
                      "net"}),
}
SIMULATED = {("gpu", "gdr"): "1"}  # every simulated GPU supports GPU Direct RDMA
NOT_KEPT_WHY = {
    ("gpu", "gdr"): "NCCL asks the simulated machine, whose GPUs all support GPU Direct RDMA",
    ("net", "keep"): "NCCL sets it at run time", ("gpu", "keep"): "NCCL sets it at run time",
    ("pci", "keep"): "NCCL sets it at run time",
}


def read_nccl_xml(path: Path, text: str, catalog: GpuCatalog,
                  gpu_model: Optional[str] = None) -> RawHost:
    return _Reader(path, catalog, gpu_model).read(text)


class _Reader:
    def __init__(self, path: Path, catalog: GpuCatalog, forced_model: Optional[str]) -> None:
        self.path = path
        self.catalog = catalog
        self.forced_model = forced_model
        self.notes = Notes()
        self.models: dict[etree._Element, str] = {}
        self.seen: dict[Key, int] = {}  # bus id -> line, for duplicates
        self.ref: Reference

    # ---- messages ----

    def fail(self, el: etree._Element, msg: str, attr: Optional[str] = None) -> TopoImportError:
        """FILE:LINE: <pci busid="..."> attr="value": msg (as `topo validate` words it)."""
        busid = el.get("busid")
        what = f'<{el.tag} busid="{busid}">' if busid and attr != "busid" else f"<{el.tag}>"
        if attr:
            value = el.get(attr)
            what += f' {attr}="{value}"' if value is not None else f" {attr}"
        return TopoImportError(f"{self.path}:{el.sourceline}: {what}: {msg}")

    def attr(self, el: etree._Element, name: str, parse: Callable[[str], T],
             what: str) -> Optional[T]:
        """An attribute parsed, None when absent; a bad value is an error."""
        raw = el.get(name)
        if raw is None:
            return None
        try:
            return parse(raw.strip())
        except (ValueError, PciFormatError):
            raise self.fail(el, f"expected {what}", name) from None

    def int_attr(self, el: etree._Element, name: str) -> Optional[int]:
        return self.attr(el, name, int, "a decimal integer")

    def hex_attr(self, el: etree._Element, name: str) -> Optional[int]:
        return self.attr(el, name, lambda v: int(v, 16), "a hexadecimal number (0x...)")

    # ---- the document ----

    def read(self, text: str) -> RawHost:
        try:
            root = etree.fromstring(text.encode(), etree.XMLParser(resolve_entities=False,
                                                                   remove_comments=True))
        except etree.XMLSyntaxError as e:
            raise TopoImportError(f"{self.path}:{e.lineno}: not well-formed XML: {e.msg}") from None
        if root.tag == "graphs":
            raise TopoImportError(f"{self.path}:{root.sourceline}: this is NCCL's graph dump "
                                  "(NCCL_GRAPH_DUMP_FILE); import its topology dump "
                                  f"(NCCL_TOPO_DUMP_FILE, {TOPO_DUMP} in a run directory)")
        if root.tag != "system":
            raise TopoImportError(f"{self.path}:{root.sourceline}: <{root.tag}> is not an NCCL "
                                  "topology: its top element is <system>")
        cpus = [c for c in root if c.tag == "cpu"]
        if not cpus:
            raise TopoImportError(f"{self.path}:{root.sourceline}: <system> has no <cpu>: an "
                                  "NCCL topology holds its devices in one <cpu> per NUMA node")
        for c in root:
            if c.tag != "cpu":
                self.notes.add(f"<{c.tag}> under <system> is not part of a topology: ignored")

        # The GPU model decides the reference for everything else, so it comes first.
        gpu_pcis = [p for c in cpus for p in c.iter("pci") if self.kind(p) == "gpu"]
        if not gpu_pcis:
            raise TopoImportError(f"{self.path}: no GPU in this topology (no <pci> of class "
                                  "0x03...)")
        self.models = {p: self.gpu_model(p) for p in gpu_pcis}
        self.ref = reference_for(most_common(list(self.models.values())))

        self.note_unread(root)
        sockets = [self.socket(c) for c in cpus]
        self.number_unknown_numa(sockets, cpus)
        nvswitches = self.resolve_nvlinks(sockets)
        self.order_nics(sockets)
        return RawHost(self.cpu(cpus), sockets, nvswitches, real_bus_ids=True,
                       fallback_cores=(self.ref.cpu.cores_per_socket,
                                       self.ref.cpu.threads_per_core),
                       reference=self.ref.preset, notes=self.notes,
                       collnet=self.collnet(root))

    def note_unread(self, root: etree._Element) -> None:
        """Every attribute the spec does not keep, and <pcilink>s, said once each."""
        for el in root.iter():
            if el.tag == "pcilink":
                self.notes.add("<pcilink> (a PCI link between two CPUs' devices) is not simulated: "
                               "left out")
            for attr, value in el.attrib.items():
                tag_attr = (str(el.tag), str(attr))
                if attr not in READ_ATTRS.get(str(el.tag), {attr}) and SIMULATED.get(tag_attr) != value:
                    why = NOT_KEPT_WHY.get(tag_attr, "not simulated")
                    self.notes.add(f"<{el.tag}> {attr}: not kept ({why})")

    def kind(self, el: etree._Element) -> str:
        cls = (el.get("class") or "").lower()
        if not cls:
            raise self.fail(el, "no class: cannot tell a PCI switch from a GPU or NIC", "class")
        if cls.startswith(BRIDGE_CLASSES):
            return "switch"
        if cls.startswith(GPU_CLASSES):
            return "gpu"
        return "nic" if cls.startswith(NIC_CLASS) else "other"

    # ---- CPUs ----

    def cpu(self, cpus: list[etree._Element]) -> RawCpu:
        """One CPU description for the host (a preset has one): the first socket's,
        each attribute missing everywhere taken from the reference."""
        ref = self.ref.cpu

        def pick(name: str, values: list[T], default: T) -> T:
            if not values:
                self.notes.add(f"<cpu> has no {name}: took {default} from {self.ref.preset}")
                return default
            if len(set(values)) > 1:
                self.notes.add(f"<cpu> {name} differs between sockets "
                               f"({', '.join(sorted(map(str, set(values))))}): a preset has one "
                               f"CPU, took {values[0]}")
            return values[0]

        def strings(name: str) -> list[str]:
            return [v for c in cpus if (v := (c.get(name) or "").strip())]

        def ints(name: str) -> list[int]:
            return [v for c in cpus if (v := self.int_attr(c, name)) is not None]

        arch = pick("arch", strings("arch"), ref.arch)
        if arch not in ("x86_64", "arm64", "ppc64"):
            raise self.fail(cpus[0], "expected x86_64, arm64 or ppc64", "arch")
        return RawCpu(arch, pick("vendor", strings("vendor"), ref.vendor),
                      pick("familyid", ints("familyid"), ref.family_id),
                      pick("modelid", ints("modelid"), ref.model_id))

    def socket(self, el: etree._Element) -> RawSocket:
        numa = self.int_attr(el, "numaid")
        affinity = (el.get("affinity") or "").strip().lower() or None
        if affinity is not None and not _CPUMASK.match(affinity):
            raise self.fail(el, "expected a Linux cpumask: 32-bit hex words, most significant "
                            "first", "affinity")
        sock = RawSocket(-1 if numa is None or numa < 0 else numa, affinity)
        for c in el:
            if c.tag == "pci":
                node = self.pci(c)
                if node is not None:
                    sock.children.append(node)
            elif c.tag == "nic":
                names = ", ".join(n.get("name", "?") for n in c.findall("net"))
                self.notes.add(f"NIC {names} has no PCI device (NCCL's socket transport): "
                               "left out")
            else:
                self.notes.add(f"<{c.tag}> under <cpu> ignored")
        return sock

    def number_unknown_numa(self, sockets: list[RawSocket], cpus: list[etree._Element]) -> None:
        used = {s.numa_id for s in sockets if s.numa_id >= 0}
        for s, el in zip(sockets, cpus):
            if s.numa_id >= 0:
                continue
            s.numa_id = min(set(range(len(sockets) + len(used) + 1)) - used)
            used.add(s.numa_id)
            self.notes.add(f"<cpu> without a NUMA id (numaid=\"{el.get('numaid', '')}\"): "
                           f"numbered {s.numa_id}")
        seen: dict[int, etree._Element] = {}
        for s, el in zip(sockets, cpus):
            if s.numa_id in seen:
                raise self.fail(el, f"NUMA id used twice (also line {seen[s.numa_id].sourceline})",
                                "numaid")
            seen[s.numa_id] = el

    # ---- PCI devices ----

    def key(self, el: etree._Element) -> Key:
        raw = el.get("busid")
        if raw is None:
            raise self.fail(el, "no busid", "busid")
        try:
            a = PciAddress.parse(raw)
        except PciFormatError:
            raise self.fail(el, "expected a PCI bus id like 0000:18:00.0", "busid") from None
        key = (a.domain, a.bus, a.device, a.function)
        if key in self.seen:
            raise self.fail(el, f"bus id used twice (also line {self.seen[key]})", "busid")
        self.seen[key] = getattr(el, "sourceline", None) or 0
        return key

    def link(self, el: etree._Element, machine: Optional[tuple[PciLink, str]] = None) -> PciLink:
        """The device's PCIe link as the file says it. An attribute the file
        leaves out NCCL reads from the machine (/sys): `machine`'s (the link and
        whose it is) where known; one it cannot parse NCCL takes as Gen3 x16."""
        speed = el.get("link_speed")
        m = _GT_S.match(speed or "")
        gen = GEN_BY_GTS.get(float(m.group(1))) if m else None
        if gen is None and speed is None and machine is not None:
            gen = machine[0].generation
            self.notes.add(f"{machine[1]} without a PCI link speed (NCCL reads the machine's): "
                           f"{PCIE_LINK_SPEEDS[gen]}")
        elif gen is None:
            gen = NCCL_DEFAULT_GEN
            self.notes.add(f"PCI link speed {speed!r} missing or unknown: "
                           f"{PCIE_LINK_SPEEDS[gen]}, as NCCL reads it")
        width = self.int_attr(el, "link_width")
        if width is None and el.get("link_width") is None and machine is not None:
            width = machine[0].width
            self.notes.add(f"{machine[1]} without a PCI link width (NCCL reads the machine's): "
                           f"x{width}")
        elif width is None or not 1 <= width <= 32:
            self.notes.add(f"PCI link width {el.get('link_width', '')!r} missing or invalid: "
                           f"x{NCCL_DEFAULT_WIDTH}")
            width = NCCL_DEFAULT_WIDTH
        return PciLink(PCIE_LINK_SPEEDS[gen], width)

    def identity(self, el: etree._Element, default: PciIdentity, what: str) -> PciIdentity:
        ids = [self.hex_attr(el, a) for a in ID_ATTRS]
        if any(v is None for v in ids):
            self.notes.add(f"{what} without PCI vendor/device ids: took {self.ref.preset}'s "
                           f"({default.vendor:#06x}:{default.device:#06x})")
        return PciIdentity(*(v if v is not None else d
                             for v, d in zip(ids, (default.vendor, default.device,
                                                   default.subsystem_vendor,
                                                   default.subsystem_device))))

    def pci(self, el: etree._Element) -> Optional[RawNode]:
        kind = self.kind(el)
        key = self.key(el)
        if kind == "switch":
            children = [n for c in el if c.tag == "pci" if (n := self.pci(c)) is not None]
            if not children:
                self.notes.add("PCI switch with no GPU or NIC below it: left out")
                return None
            return RawSwitch(key, self.identity(el, self.ref.switch_identity, "PCI switches"),
                             self.link(el), children)
        if kind == "gpu":
            return self.gpu(el, key)
        if kind == "nic":
            return self.nic(el, key)
        self.notes.add(f"PCI device of class {el.get('class')} (no switch, GPU or NIC): left out")
        return None

    # ---- GPUs ----

    def gpu_model(self, el: etree._Element) -> str:
        if self.forced_model is not None:
            return self.catalog.get(self.forced_model).key
        vendor, device = self.hex_attr(el, "vendor"), self.hex_attr(el, "device")
        gpu = el.find("gpu")
        sm = self.int_attr(gpu, "sm") if gpu is not None else None
        if device is not None and vendor in (None, NVIDIA_VENDOR):
            found = model_by_device(self.catalog, device)
            if found is not None:
                model, variant = found
                if variant:
                    self.notes.add(f"{variant} GPUs (device {device:#06x}) are presented as "
                                   f"{model.key} ({model.name})")
                return model.key
        if sm is not None:
            by_sm = model_by_sm(self.catalog, sm)
            if by_sm is not None:
                self.notes.add(f"GPU device {'unknown' if device is None else f'{device:#06x}'}"
                               f", sm {sm}: presented as {by_sm.key} ({by_sm.name})")
                return by_sm.key
        said = ", ".join(([f"vendor {vendor:#06x}"] if vendor is not None else []) +
                         ([f"device {device:#06x}"] if device is not None else ["no device id"]) +
                         ([f"sm {sm}"] if sm is not None else ["no <gpu sm>"]))
        known = ", ".join(f"{m.key} ({m.pci_device_id:#06x}, sm {m.sm})" for m in self.catalog)
        raise self.fail(el, f"cannot tell the GPU model ({said}); ncclsim knows {known}: give "
                        "--gpu-model", "device" if device is not None else None)

    def gpu(self, el: etree._Element, key: Key) -> RawGpu:
        model = self.catalog.get(self.models[el])
        gpu = el.find("gpu")
        dev = self.int_attr(gpu, "dev") if gpu is not None else None
        links: dict[Key, int] = {}
        for nv in gpu.findall("nvlink") if gpu is not None else []:
            target = self.nvlink_target(nv)
            count = self.int_attr(nv, "count")
            if count is None or count < 0:
                raise self.fail(nv, "expected a count >= 0", "count")
            if target is not None and count:
                links[target] = links.get(target, 0) + count
        if gpu is not None and gpu.find("c2c") is not None:
            self.notes.add("C2C links (Grace CPU to GPU) are not simulated: left out")
        nvlinks = list(links.items())
        if gpu is None and model.nvlinks:
            # No <gpu> at all (cloud files): NCCL asks NVML, and the 8-GPU boards of
            # an NVLink model have NVSwitches.
            ref = reference_for(model.key)
            split = nvswitch_split(ref, model.nvlinks)
            nvlinks = [((ASSUMED_NVSWITCH, i), n) for i, n in enumerate(split)]
            self.notes.add(f"{model.key} GPUs without <gpu> in the file (NCCL asks NVML for "
                           f"their NVLinks): assumed {model.nvlinks} NVLinks each to "
                           f"{len(split)} NVSwitch(es), as on {ref.preset}")
        elif gpu is not None and gpu.find("nvlink") is None and model.nvlinks:
            nvlinks = self.nvml_nvlinks(model.key, model.nvlinks)
        board = PciLink(PCIE_LINK_SPEEDS[model.pcie_gen], model.pcie_width)
        link = self.link(el, (board, f"{model.key} GPUs"))
        return RawGpu(key, (dev,) if dev is not None else key, model.key, nvlinks,
                      None if link == board else link)

    def nvml_nvlinks(self, model: str, count: int) -> list[tuple[Key, int]]:
        """A <gpu> without <nvlink>: NCCL asks NVML for the links (ncclTopoGetXmlFromGpu),
        which on a board of this model go to its NVSwitches, spread as on the model's
        preset. A model with no such preset (PCIe boards with bridges, V100's mesh)
        keeps none: its layout is not known."""
        ref = reference_for(model)
        if sum(ref.nvlink_split) != count:
            self.notes.add(f"{model} GPUs with <gpu> but no <nvlink> (NCCL asks NVML for their "
                           "NVLinks): no preset shows this model's NVLink layout, so none are "
                           "assumed; add them to the spec if the machine has them")
            return []
        self.notes.add(f"{model} GPUs with <gpu> but no <nvlink> (NCCL asks NVML for their "
                       f"NVLinks): assumed {count} NVLinks each to {len(ref.nvlink_split)} "
                       f"NVSwitch(es), as on {ref.preset}")
        return [((ASSUMED_NVSWITCH, i), n) for i, n in enumerate(ref.nvlink_split)]

    def nvlink_target(self, nv: etree._Element) -> Optional[Key]:
        """The target's key: a bus id, (-1, *bus id) for a GPU, (-2, *bus id) for a
        device of unknown class; INVISIBLE_KEY for an NVSwitch with no bus id."""
        tclass = (nv.get("tclass") or "").lower()
        raw = (nv.get("target") or "").strip().lower()
        if tclass and tclass != NVSWITCH_TCLASS and not tclass.startswith(GPU_TCLASS):
            self.notes.add(f"NVLinks of tclass {tclass} (not to an NVSwitch or GPU, "
                           "e.g. to a CPU) are not simulated: left out")
            return None
        key = self.bus_key(raw)
        if key is None and tclass.startswith(GPU_TCLASS):
            # NCCL looks the GPU up by this id and finds none: the links go.
            self.notes.add("NVLinks to a GPU that is not in the file: left out")
            return None
        if key is None or raw == INVISIBLE_NVSWITCH:
            # NCCL reads no target behind tclass 0x068000, and gives a target it
            # cannot find that class (xml.cc): what it writes in VMs.
            self.notes.add(f'NVLink target "{raw}" is no device (written in VMs, where the '
                           "NVSwitch is not visible): an NVSwitch, as NCCL takes it")
            return INVISIBLE_KEY
        # Kept apart by the class; resolved in resolve_nvlinks.
        return key if tclass == NVSWITCH_TCLASS else (-1 if tclass else -2, *key)

    @staticmethod
    def bus_key(raw: str) -> Optional[Key]:
        try:
            a = PciAddress.parse(raw)
        except PciFormatError:
            return None
        return (a.domain, a.bus, a.device, a.function)

    def resolve_nvlinks(self, sockets: list[RawSocket]) -> list[Key]:
        """GPU targets to the GPUs' keys (links to a GPU not in the file go);
        the NVSwitches are every other target."""
        gpus = [n for s in sockets for n in walk(s.children) if isinstance(n, RawGpu)]
        gpu_keys = {g.key for g in gpus}
        nvswitches: set[Key] = set()
        for g in gpus:
            kept = []
            for target, count in g.nvlinks:
                if target[0] == -2:  # no tclass: NCCL asks /sys; not a GPU here: an NVSwitch
                    target = (-1, *target[1:]) if target[1:] in gpu_keys else target[1:]
                    self.notes.add("NVLinks without tclass: to the GPU of that bus id, else to "
                                   "an NVSwitch, as NCCL classes them")
                if target[0] == -1:
                    if target[1:] in gpu_keys and target[1:] != g.key:
                        kept.append((target[1:], count))
                    else:
                        self.notes.add("NVLinks to a GPU that is not in the file: left out")
                    continue
                nvswitches.add(target)
                kept.append((target, count))
            g.nvlinks = kept
        return sorted(nvswitches)

    # ---- NICs ----

    def collnet(self, root: etree._Element) -> bool:
        """coll="1" on a <net>: its network reduces in its switches (NCCL's CollNet,
        SHARP). The spec says so for the whole host."""
        nets = list(root.iter("net"))
        coll = [n for n in nets if (n.get("coll") or "").strip() == "1"]
        if not coll:
            return False
        some = f" ({len(coll)} of {len(nets)} NICs say so; here every NIC offers it)" \
            if len(coll) < len(nets) else ""
        self.notes.add(f'NICs with coll="1": the network reduces in its switches (CollNet): '
                       f"collnet: true{some}; NCCL uses it with NCCL_COLLNET_ENABLE=1")
        return True

    def order_nics(self, sockets: list[RawSocket]) -> None:
        """The net plugin's order: the file's `dev` where every NIC has one; else
        the numbers ending the names (mlx5_N is NET/N) where those are distinct;
        else bus order."""
        nics = [n for s in sockets for n in walk(s.children) if isinstance(n, RawNic)]
        if all(len(n.order) == 1 for n in nics):
            return
        numbers = [m.group(1) if (m := _TRAILING_NUMBER.search(n.name or "")) else None
                   for n in nics]
        if None not in numbers and len(set(numbers)) == len(nics):
            for n, number in zip(nics, numbers):
                n.order = (int(number),)  # type: ignore[arg-type]
        else:
            for n in nics:
                n.order = n.key

    def nic(self, el: etree._Element, key: Key) -> RawNic:
        ref = self.ref.nic
        nic = el.find("nic")
        nets = nic.findall("net") if nic is not None else []
        net = nets[0] if nets else None
        if len(nets) > 1:
            self.notes.add(f"NIC {el.get('busid')} has {len(nets)} <net> (ports); a preset NIC "
                           "has one: kept the first")
        cls = (el.get("class") or "").lower()
        if cls.startswith(IB_CLASS):
            transport = "ib"
        elif cls.startswith(ETHERNET_CLASS):
            transport = "ethernet"
        else:
            transport = ref.transport
            self.notes.add(f"NIC class {cls} names no link layer: {transport}")
        speed = port = dev = max_conn = gdr = None
        latency: Optional[float] = None
        if net is not None:
            speed, port, dev = (self.int_attr(net, a) for a in ("speed", "port", "dev"))
            max_conn = self.int_attr(net, "maxconn")
            gdr = self.int_attr(net, "gdr")
            latency = self.attr(net, "latency", float, "a number")
        if speed is None or speed <= 0:
            self.notes.add(f"NIC speed not in the file: {ref.speed_mbps} Mb/s, as on "
                           f"{self.ref.preset}")
            speed = ref.speed_mbps
        if port is None or port < 1:
            port = ref.port
        if gdr not in (None, 0, 1):
            raise self.fail(net, "expected 0 or 1", "gdr")  # type: ignore[arg-type]
        return RawNic(
            key, (dev,) if dev is not None else key, net.get("name") if net is not None else None,
            transport, speed, port, latency if latency is not None and latency >= 0 else 0.0,
            self.identity(el, ref.identity, "NICs"), self.link(el),
            max_conn if max_conn is not None and max_conn > 0 else None,
            None if gdr is None else bool(gdr))
