"""The cluster model: hosts and what is inside them, the single source of truth.

Everything a simulated host shows (the platform file read by the fake driver,
NVML and the net plugin; the NCCL topology XML) is derived from a `Host`, so
the pieces can never disagree. A `Host` checks its own consistency when built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

from ncclsim.cluster.errors import ClusterError
from ncclsim.platform.pci import PciAddress

# PCI class codes, as NCCL compares them (strings in the XML).
PCI_CLASS_BRIDGE = 0x060400
PCI_CLASS_GPU = 0x030200  # 3D controller
PCI_CLASS_NVSWITCH = 0x068000  # also NVLink's tclass for a switch
PCI_CLASS_NIC_IB = 0x020700
PCI_CLASS_NIC_ETHERNET = 0x020000

NIC_CLASSES = {"ib": PCI_CLASS_NIC_IB, "ethernet": PCI_CLASS_NIC_ETHERNET}
NVLINK_TARGET_CLASSES = (PCI_CLASS_NVSWITCH, PCI_CLASS_GPU)

# The link speed strings NCCL's topology code knows (kvDictPciGen), by PCIe generation.
PCIE_LINK_SPEEDS = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe",
                    4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}

# NCCL keeps at most 18 NVLinks per GPU (sm >= 90), and so does the platform file.
MAX_NVLINKS = 18


@dataclass(frozen=True)
class PciIdentity:
    vendor: int
    device: int
    subsystem_vendor: int
    subsystem_device: int


@dataclass(frozen=True)
class PciLink:
    """The upstream link of a PCI device, as NCCL reads it from /sys."""
    speed: str  # one of PCIE_LINK_SPEEDS' values
    width: int  # lanes

    @property
    def generation(self) -> int:
        return next(gen for gen, speed in PCIE_LINK_SPEEDS.items() if speed == self.speed)


@dataclass(frozen=True)
class CpuSocket:
    """One NUMA node; the root of a PCI tree in NCCL's topology."""
    numa_id: int
    affinity: str  # cpumask as Linux writes nodeN/cpumap: 32-bit hex words, most significant first
    arch: str  # "x86_64", "arm64", "ppc64"
    vendor: str  # "GenuineIntel", "AuthenticAMD"
    family_id: int
    model_id: int
    children: tuple[PciAddress, ...]  # PCI switches, GPUs or NICs on its root ports


@dataclass(frozen=True)
class PciSwitch:
    bus_id: PciAddress
    identity: PciIdentity
    link: PciLink
    children: tuple[PciAddress, ...]  # PCI switches, GPUs or NICs below it, in bus order


@dataclass(frozen=True)
class NvLink:
    """`count` NVLinks from a GPU to one target (an NVSwitch or a peer GPU)."""
    target: PciAddress
    count: int
    tclass: int = PCI_CLASS_NVSWITCH  # the target's PCI class


@dataclass(frozen=True)
class Gpu:
    index: int  # CUDA ordinal = NVML index = NCCL's `dev`
    model: str  # key in ncclsim/platform/gpu_models.json
    bus_id: PciAddress
    numa_node: int
    uuid: str
    identity: PciIdentity
    link: PciLink
    sm: int  # compute capability, major*10 + minor
    nvlinks: tuple[NvLink, ...] = ()

    @property
    def nvlink_count(self) -> int:
        return sum(link.count for link in self.nvlinks)


@dataclass(frozen=True)
class NvSwitch:
    """Seen by NCCL only as an NVLink target; never a node of the XML."""
    bus_id: PciAddress


@dataclass(frozen=True)
class Nic:
    index: int  # the net plugin's device index
    name: str  # the plugin's device name, e.g. "mlx5_0" (= <net name> in the XML)
    bus_id: PciAddress
    speed_mbps: int
    guid: int
    switch: Optional[PciAddress]  # the PCI switch it sits behind; None: a CPU root port
    transport: str  # "ib" or "ethernet" (its PCI class)
    identity: PciIdentity
    link: PciLink
    port: int = 1
    latency_us: float = 0.0
    # Left to the net plugin when None (what it reports is what the NIC can do).
    max_conn: Optional[int] = None
    gdr: Optional[bool] = None

    @property
    def pci_class(self) -> int:
        return NIC_CLASSES[self.transport]


Device = Union[PciSwitch, Gpu, Nic]


@dataclass(frozen=True)
class Host:
    index: int
    hostname: str  # what a program on the host sees
    host_id: str  # NCCL_HOSTID: one NCCL host hash per simulated host
    domain: int  # PCI domain of every bus id on this host
    sockets: tuple[CpuSocket, ...]
    switches: tuple[PciSwitch, ...]
    gpus: tuple[Gpu, ...]
    nvswitches: tuple[NvSwitch, ...]
    nics: tuple[Nic, ...]
    multicast: bool = False  # NVSwitch multicast objects (NVLS) for the host's GPUs
    collnet: bool = False  # its NICs' fabric reduces in the network (SHARP): CollNet
    _devices: dict[PciAddress, Device] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_devices", _check_host(self))

    def device(self, bus_id: PciAddress) -> Device:
        """The switch, GPU or NIC at `bus_id` on this host."""
        return self._devices[bus_id]

    def bus_ids(self) -> Iterator[PciAddress]:
        """Every bus id the host uses, NVSwitches included."""
        yield from self._devices
        yield from (s.bus_id for s in self.nvswitches)


@dataclass(frozen=True)
class Cluster:
    preset: str  # name of the preset it was built from
    hosts: tuple[Host, ...]

    @property
    def gpus_per_host(self) -> tuple[int, ...]:
        return tuple(len(h.gpus) for h in self.hosts)


def _check_host(h: Host) -> dict[PciAddress, Device]:
    """Raise ClusterError for anything NCCL or the platform file would reject or
    silently misread; returns the host's devices by bus id."""
    where = f"host {h.index} ({h.hostname})"

    def fail(msg: str) -> ClusterError:
        return ClusterError(f"{where}: {msg}")

    devices: dict[PciAddress, Device] = {}
    everything: list[Device] = [*h.switches, *h.gpus, *h.nics]
    for dev in everything:
        if dev.bus_id in devices:
            raise fail(f"bus id {dev.bus_id} is used twice")
        devices[dev.bus_id] = dev
    nvswitch_ids = {s.bus_id for s in h.nvswitches}
    if len(nvswitch_ids) != len(h.nvswitches) or nvswitch_ids & devices.keys():
        raise fail("NVSwitch bus ids must be unique and differ from every PCI device's")
    for bus in (*devices, *nvswitch_ids):
        if bus.domain != h.domain:
            raise fail(f"bus id {bus} is outside the host's PCI domain {h.domain:04x}")

    if not h.gpus:
        raise fail("a host needs at least one GPU")
    if [g.index for g in h.gpus] != list(range(len(h.gpus))):
        raise fail("GPU indices must be 0..n-1 in order")
    if [n.index for n in h.nics] != list(range(len(h.nics))):
        raise fail("NIC indices must be 0..n-1 in order")
    for attr in ("name", "guid"):
        values = [getattr(n, attr) for n in h.nics]
        if len(set(values)) != len(values):
            raise fail(f"NIC {attr}s must be unique, got {values}")
    uuids = [g.uuid for g in h.gpus]
    if len(set(uuids)) != len(uuids):
        raise fail("GPU UUIDs must be unique")

    # Every switch, GPU and NIC hangs exactly once in the tree below one socket.
    numas = [s.numa_id for s in h.sockets]
    if not h.sockets or len(set(numas)) != len(numas):
        raise fail(f"a host needs sockets with distinct NUMA ids, got {numas}")
    parent: dict[PciAddress, Union[CpuSocket, PciSwitch]] = {}
    numa_of: dict[PciAddress, int] = {}

    def place(node: Union[CpuSocket, PciSwitch], numa: int) -> None:
        for child in node.children:
            if child not in devices:
                raise fail(f"{_name(node)} lists {child}, which is no switch, GPU or NIC "
                           "of the host")
            if child in parent:
                raise fail(f"{child} is placed twice (under {_name(parent[child])} and "
                           f"{_name(node)})")
            parent[child] = node
            numa_of[child] = numa
            sub = devices[child]
            if isinstance(sub, PciSwitch):
                place(sub, numa)

    for socket in h.sockets:
        place(socket, socket.numa_id)
    unplaced = [str(b) for b in devices if b not in parent]
    if unplaced:
        raise fail(f"not placed under any socket: {', '.join(unplaced)}")

    for g in h.gpus:
        if g.numa_node != numa_of[g.bus_id]:
            raise fail(f"GPU {g.index} says NUMA node {g.numa_node} but sits under socket "
                       f"{numa_of[g.bus_id]}")
        if g.nvlink_count > MAX_NVLINKS:
            raise fail(f"GPU {g.index} has {g.nvlink_count} NVLinks, at most {MAX_NVLINKS}")
        targets = [link.target for link in g.nvlinks]
        if len(set(targets)) != len(targets):
            raise fail(f"GPU {g.index}: one NVLink entry per target (merge the counts)")
        for link in g.nvlinks:
            if link.count < 1:
                raise fail(f"GPU {g.index}: NVLink count to {link.target} must be >= 1")
            if link.tclass == PCI_CLASS_NVSWITCH and link.target not in nvswitch_ids:
                raise fail(f"GPU {g.index}: NVLink target {link.target} is not an NVSwitch "
                           "of the host")
            if link.tclass == PCI_CLASS_GPU and not (
                    isinstance(devices.get(link.target), Gpu) and link.target != g.bus_id):
                raise fail(f"GPU {g.index}: NVLink target {link.target} is not another GPU "
                           "of the host")
            if link.tclass not in NVLINK_TARGET_CLASSES:
                raise fail(f"GPU {g.index}: NVLink tclass {link.tclass:#08x} is neither an "
                           "NVSwitch "
                           f"({PCI_CLASS_NVSWITCH:#08x}) nor a GPU ({PCI_CLASS_GPU:#08x})")
    for n in h.nics:
        above = parent[n.bus_id]
        actual = above.bus_id if isinstance(above, PciSwitch) else None
        if n.switch != actual:
            raise fail(f"NIC {n.name} says it is behind {n.switch} but sits under {_name(above)}")
        if n.transport not in NIC_CLASSES:
            raise fail(f"NIC {n.name}: transport must be one of {', '.join(NIC_CLASSES)}")
    for dev in devices.values():
        if dev.link.speed not in PCIE_LINK_SPEEDS.values():
            raise fail(f"{_name(dev)}: link speed {dev.link.speed!r} is not one NCCL knows "
                       f"({', '.join(PCIE_LINK_SPEEDS.values())})")
    return devices


def _name(node: Union[CpuSocket, Device]) -> str:
    if isinstance(node, CpuSocket):
        return f"socket {node.numa_id}"
    if isinstance(node, Gpu):
        return f"GPU {node.index} ({node.bus_id})"
    if isinstance(node, Nic):
        return f"NIC {node.name} ({node.bus_id})"
    return f"PCI switch {node.bus_id}"
