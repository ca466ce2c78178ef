"""From what an importer read (a RawHost) to a preset: bus numbers, NIC names
and the CPU description, in the form `ncclsim.cluster.presets` parses.

Bus numbers: a preset names each device by one bus number (0..255) within the
host; the domain is chosen per simulated host, device and function are 0. An
input with real bus ids in one PCI domain keeps its GPU, NIC and NVSwitch bus
numbers when they are distinct (switches too, where free), so NCCL's logs of
the simulated host name the same devices. Anything else (several domains, as
on Azure VMs; devices sharing a bus; nvidia-smi, which shows no bus ids) is
numbered afresh, depth first, socket by socket.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, TypeVar

from ncclsim.cluster.cpumask import cpumask, socket_cpus
from ncclsim.cluster.presets import (
    CpuSpec, GpuSpec, NicSpec, Preset, SocketSpec, SwitchSpec)
from ncclsim.platform.pci import PciAddress
from ncclsim.topology.importers.raw import (
    Key, RawGpu, RawHost, RawNic, RawNode, RawSocket, RawSwitch, TopoImportError, host_nodes,
    walk)

MAX_BUS = 0xFF
SOCKET_ALIGN = 0x10  # fresh numbering starts each socket at a multiple of this, if it fits
NIC_NAME = "mlx5_{index}"  # the name of a NIC the input does not name

T = TypeVar("T")


@dataclass(frozen=True)
class Assembled:
    preset: Preset
    renumbered: dict[str, int]  # input bus id -> bus number here, where they differ


def assemble(host: RawHost, name: str, description: str, source: Path) -> Assembled:
    nodes = host_nodes(host)
    if not any(isinstance(n, RawGpu) for n in nodes):
        raise TopoImportError(f"{source}: no GPU found")
    buses = _keep_bus_numbers(host, nodes) if host.real_bus_ids else None
    devs: dict[Key, int] = {}
    if buses is None:
        buses = _fresh_bus_numbers(host)
        _follow_input_order(nodes, buses)
    else:
        _note_gpu_order(host, nodes, buses)
        devs = _nic_devs(nodes, buses)
    names = _nic_names(nodes, buses, devs, host)
    cpu, affinities = _cpu(host)
    sockets = tuple(
        SocketSpec(s.numa_id, aff, *_children(s.children, buses, _Nics(names, devs)))
        for s, aff in zip(host.sockets, affinities))
    preset = Preset(name, description, source, cpu,
                    tuple(sorted(buses[k] for k in host.nvswitches)), sockets, collnet=host.collnet)
    renumbered = {}
    if host.real_bus_ids:
        for key, bus in buses.items():
            if len(key) == 4 and PciAddress(*key) != PciAddress(key[0], bus):
                renumbered[str(PciAddress(*key))] = bus
    return Assembled(preset, renumbered)


# ---- bus numbers ----

def _keep_bus_numbers(host: RawHost, nodes: list[RawNode]) -> Optional[dict[Key, int]]:
    """The input's bus numbers, or None when its GPUs, NICs and NVSwitches do not
    have distinct ones in a single domain."""
    real = [k for k in (*(n.key for n in nodes), *host.nvswitches) if len(k) == 4]
    if len({k[0] for k in real}) > 1:
        return None
    fixed = [n.key for n in nodes if not isinstance(n, RawSwitch)] + \
        [k for k in host.nvswitches if len(k) == 4]
    if any(len(k) != 4 for k in fixed) or len({k[1] for k in fixed}) != len(fixed):
        return None
    buses = {k: k[1] for k in fixed}
    taken = set(buses.values())

    def free(below: int) -> int:
        # Just below the devices it leads to, as a switch usually is; else the lowest free.
        candidates: list[int] = [*range(below - 1, 0, -1), *range(1, MAX_BUS + 1)]
        for b in candidates:
            if b not in taken:
                return b
        raise TopoImportError(f"{len(taken)} devices: more than one host's {MAX_BUS} buses")

    for n in nodes:
        if isinstance(n, RawSwitch):
            bus = n.key[1] if len(n.key) == 4 and n.key[1] not in taken else free(
                min((buses[d.key] for d in walk(n.children) if d.key in buses), default=1))
            buses[n.key] = bus
            taken.add(bus)
    for k in host.nvswitches:
        if k not in buses:
            buses[k] = free(1)
            taken.add(buses[k])
    return buses


def _in_input_order(items: Sequence[T], below: Callable[[T], list[RawNode]]) -> list[T]:
    """Sockets or devices in the order that numbers GPUs and NICs as the input
    does: by first GPU; one without GPUs before the first whose NICs come later."""
    def first(item: T, gpus: bool) -> tuple[int, ...]:
        """The first GPU's (or NIC's) order below `item`; () if none."""
        return min((n.order for n in walk(below(item)) if isinstance(n, (RawGpu, RawNic))
                    and isinstance(n, RawGpu) == gpus), default=())

    out = sorted((i for i in items if first(i, True)), key=lambda i: first(i, True))
    for item in sorted((i for i in items if not first(i, True)), key=lambda i: first(i, False)):
        nic = first(item, False)
        later = [k for k, o in enumerate(out) if nic and first(o, False) > nic]
        out.insert(later[0] if later else len(out), item)
    return out


def _subtree(node: RawNode) -> list[RawNode]:
    return [node]


def _fresh_bus_numbers(host: RawHost) -> dict[Key, int]:
    buses: dict[Key, int] = {}
    total = len(host_nodes(host)) + len(host.nvswitches)
    if total > MAX_BUS:
        raise TopoImportError(f"{total} PCI devices and NVSwitches: more than a host's "
                              f"{MAX_BUS} buses")
    nxt = 1
    for k in sorted(host.nvswitches):
        buses[k] = nxt
        nxt += 1

    def number(children: list[RawNode]) -> None:
        nonlocal nxt
        for c in _in_input_order(children, _subtree):
            buses[c.key] = nxt
            nxt += 1
            if isinstance(c, RawSwitch):
                number(c.children)

    for s in _in_input_order(host.sockets, lambda s: s.children):
        aligned = -(-nxt // SOCKET_ALIGN) * SOCKET_ALIGN
        if aligned + (total - len(buses)) <= MAX_BUS + 1:
            nxt = aligned
        number(s.children)
    return buses


def _follow_input_order(nodes: list[RawNode], buses: dict[Key, int]) -> None:
    """GPU and NIC indices follow bus order: hand the GPUs' bus numbers out again
    in the input's GPU order (the same for NICs)."""
    for kind in (RawGpu, RawNic):
        devs = [n for n in nodes if isinstance(n, kind)]
        pool = sorted(buses[d.key] for d in devs)
        for d, bus in zip(sorted(devs, key=lambda d: d.order), pool):
            buses[d.key] = bus


def _note_gpu_order(host: RawHost, nodes: list[RawNode], buses: dict[Key, int]) -> None:
    gpus = [n for n in nodes if isinstance(n, RawGpu)]
    if sorted(gpus, key=lambda d: buses[d.key]) != sorted(gpus, key=lambda d: d.order):
        host.notes.add("GPUs are numbered in bus order here (as NVML does); the input numbered "
                       "them otherwise")


def _nic_devs(nodes: list[RawNode], buses: dict[Key, int]) -> dict[Key, int]:
    """Each NIC's number in the net plugin where the input's order is not bus
    order (a real machine's mlx5_N is NET/N, whatever its bus); empty otherwise."""
    nics = [n for n in nodes if isinstance(n, RawNic)]
    by_input = sorted(nics, key=lambda n: n.order)
    if by_input == sorted(nics, key=lambda n: buses[n.key]):
        return {}
    return {n.key: i for i, n in enumerate(by_input)}


# ---- NIC names ----

@dataclass(frozen=True)
class _Nics:
    names: dict[Key, str]
    devs: dict[Key, int]  # empty: bus order


def _nic_names(nodes: list[RawNode], buses: dict[Key, int], devs: dict[Key, int],
               host: RawHost) -> dict[Key, str]:
    nics = sorted((n for n in nodes if isinstance(n, RawNic)),
                  key=lambda n: devs.get(n.key, buses[n.key]))
    names = {n.key: n.name for n in nics if n.name is not None}
    taken = set(names.values())
    unnamed = [(i, n) for i, n in enumerate(nics) if n.name is None]
    for i, n in unnamed:
        j = i
        while NIC_NAME.format(index=j) in taken:
            j += 1
        names[n.key] = NIC_NAME.format(index=j)
        taken.add(names[n.key])
    if unnamed:
        host.notes.add(f"{len(unnamed)} NICs have no name in the input (NCCL's net plugin "
                       f"names them at run time): named {NIC_NAME.format(index='<index>')}")
    return names


# ---- the CPU ----

def _bits(mask: str) -> int:
    return int(mask.replace(",", ""), 16)


def _cpu(host: RawHost) -> tuple[CpuSpec, list[Optional[str]]]:
    """The CPU section and each socket's explicit affinity (None where the
    preset's derived mask is the input's, or the input has none)."""
    socks = host.sockets
    known = [s.affinity for s in socks]
    layout = _derived_layout(socks) if all(a is not None for a in known) else None
    if layout is not None:
        cores, threads = layout
        affinities: list[Optional[str]] = [None] * len(socks)
    elif all(a is not None for a in known):
        # Explicit masks; the core counts then only size the host's CPU set.
        cores, threads = max(bin(_bits(a)).count("1") for a in known if a), 1
        affinities = known
    else:
        cores, threads = host.fallback_cores
        affinities = known
        host.notes.add(f"CPU affinity unknown for NUMA node(s) "
                       f"{', '.join(str(s.numa_id) for s in socks if s.affinity is None)}: "
                       f"derived from {cores} cores x {threads} threads per socket, as on "
                       f"{host.reference}")
    c = host.cpu
    return CpuSpec(c.arch, c.vendor, c.family_id, c.model_id, max(cores, 1), threads), affinities


def _derived_layout(socks: list[RawSocket]) -> Optional[tuple[int, int]]:
    """(cores, threads) per socket when the preset's own rule (Linux's x86
    numbering: first threads socket by socket, then second threads) gives
    exactly the input's masks."""
    counts = {bin(_bits(s.affinity or "0")).count("1") for s in socks}
    if len(counts) != 1:
        return None
    (n,) = counts
    for threads in (2, 1, 4, 8):
        if n == 0 or n % threads:
            continue
        cores = n // threads
        total = len(socks) * n
        if all(cpumask(socket_cpus(pos, len(socks), cores, threads), total) == s.affinity
               for pos, s in enumerate(socks)):
            return cores, threads
    return None


# ---- the tree ----

def _children(nodes: list[RawNode], buses: dict[Key, int], nic: _Nics,
              ) -> tuple[tuple[GpuSpec, ...], tuple[NicSpec, ...], tuple[SwitchSpec, ...]]:
    ordered = sorted(nodes, key=lambda n: buses[n.key])
    gpus = tuple(GpuSpec(buses[g.key], g.model, tuple((buses[t], c) for t, c in g.nvlinks), g.link)
                 for g in ordered if isinstance(g, RawGpu))
    # A preset's NIC name is a template ({index}); braces of a real name are literal.
    nics = tuple(NicSpec(buses[n.key], nic.names[n.key].replace("{", "{{").replace("}", "}}"),
                         n.transport, n.speed_mbps, n.port,
                         n.latency_us, n.identity, n.link, n.max_conn, n.gdr, nic.devs.get(n.key))
                 for n in ordered if isinstance(n, RawNic))
    switches = tuple(SwitchSpec(buses[s.key], s.identity, s.link,
                                *_children(s.children, buses, nic))
                     for s in ordered if isinstance(s, RawSwitch))
    return gpus, nics, switches
