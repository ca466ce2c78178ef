"""What an importer reads from its input, before bus numbers are chosen.

Both readers (NCCL topology XML, `nvidia-smi topo -m`) produce a `RawHost`:
the tree of sockets, PCI switches, GPUs and NICs, each device known by a
sortable key (its bus id in the input, or an invented one where the input has
none), plus notes on everything the input did not say and was assumed.
`assemble` then turns it into a preset.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Union

from ncclsim import NcclsimError
from ncclsim.cluster.model import PciIdentity, PciLink

# (domain, bus, device, function) for a device with a bus id in the input;
# (kind, index) for one that has none (nvidia-smi, an assumed NVSwitch).
Key = tuple[int, ...]


class TopoImportError(NcclsimError):
    """An input that cannot be turned into a cluster spec; names the file."""


class Notes:
    """What the input did not say and was assumed, each said once (with a count
    when many devices share it), in the order first seen."""

    def __init__(self) -> None:
        self._seen: Counter[str] = Counter()

    def add(self, message: str) -> None:
        self._seen[message] += 1

    def lines(self) -> list[str]:
        return [m if n == 1 else f"{m} (x{n})" for m, n in self._seen.items()]


@dataclass
class RawGpu:
    key: Key
    order: tuple[int, ...]  # the input's GPU numbering (NCCL dev, nvidia-smi GPU<i>)
    model: str  # key of gpu_models.json
    nvlinks: list[tuple[Key, int]]  # (target: an NVSwitch's or another GPU's key, count)
    link: Optional[PciLink] = None  # its PCIe link where it is not the model's


@dataclass
class RawNic:
    key: Key
    order: tuple[int, ...]
    name: Optional[str]  # None: the input names none; one is chosen later
    transport: str  # "ib" or "ethernet"
    speed_mbps: int
    port: int
    latency_us: float
    identity: PciIdentity
    link: PciLink
    max_conn: Optional[int]
    gdr: Optional[bool]


@dataclass
class RawSwitch:
    key: Key
    identity: PciIdentity
    link: PciLink
    children: list[RawNode] = field(default_factory=list)


RawNode = Union[RawGpu, RawNic, RawSwitch]


@dataclass
class RawSocket:
    numa_id: int
    affinity: Optional[str]  # Linux cpumap text; None: unknown
    children: list[RawNode] = field(default_factory=list)


@dataclass(frozen=True)
class RawCpu:
    arch: str
    vendor: str
    family_id: int
    model_id: int


@dataclass
class RawHost:
    cpu: RawCpu
    sockets: list[RawSocket]
    nvswitches: list[Key]
    # True when keys are the input's real bus ids (domain, bus, device, function),
    # which are then kept where the preset format allows.
    real_bus_ids: bool
    # CPUs per socket, for sockets whose affinity is unknown: (cores, threads),
    # from the preset named `reference`.
    fallback_cores: tuple[int, int]
    reference: str
    notes: Notes
    collnet: bool = False  # the NICs say the network reduces in its switches (coll="1")


def walk(nodes: list[RawNode]) -> list[RawNode]:
    """Every node below `nodes`, parents before children."""
    out: list[RawNode] = []
    for n in nodes:
        out.append(n)
        if isinstance(n, RawSwitch):
            out.extend(walk(n.children))
    return out


def host_nodes(host: RawHost) -> list[RawNode]:
    return [n for s in host.sockets for n in walk(s.children)]
