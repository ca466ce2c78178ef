"""From a preset and the CLI-style overrides (hosts, GPUs and NICs per host) to a Cluster."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional, Sequence, Union

from ncclsim.cluster.cpumask import cpumask, socket_cpus
from ncclsim.cluster.errors import ClusterError
from ncclsim.cluster.model import (
    PCI_CLASS_GPU, PCI_CLASS_NVSWITCH, Cluster, CpuSocket, Gpu, Host, Nic, NvLink, NvSwitch,
    PciIdentity, PciLink, PciSwitch, PCIE_LINK_SPEEDS)
from ncclsim.cluster.presets import (
    DEFAULT_PRESET, GpuSpec, NicSpec, Preset, SwitchSpec, load_preset)
from ncclsim.platform.config import (
    MAX_GPUS, MAX_HOST_INDEX, MAX_NICS, SYS_PCI_DEVICES, default_nic_guid,
    default_uuid, host_domain)
from ncclsim.rundir import host_name
from ncclsim.platform.models import GpuCatalog, load_models
from ncclsim.platform.pci import PciAddress

NVIDIA_VENDOR = 0x10DE
MAX_HOSTS = MAX_HOST_INDEX + 1


def build_cluster(preset: Union[str, Preset] = DEFAULT_PRESET, hosts: int = 1,
                  gpus: Optional[int] = None, nics: Optional[int] = None, *, collnet: Optional[bool] = None,
                  search: Optional[Sequence[Path]] = None, catalog: Optional[GpuCatalog] = None,
                  sys_pci_devices: Path = SYS_PCI_DEVICES) -> Cluster:
    """`hosts` copies of the preset's host, each cut to its first `gpus` GPUs and
    first `nics` NICs (default: all). `sys_pci_devices` is where real PCI
    devices are looked up, so that simulated bus ids never name one.
    `collnet` overrides the preset's: whether the network reduces in its
    switches (SHARP), which NCCL's CollNet uses."""
    p = preset if isinstance(preset, Preset) else load_preset(preset, search)
    if collnet is not None:
        p = dataclasses.replace(p, collnet=collnet)
    catalog = catalog or load_models()
    ngpus, nnics = len(p.gpus()), len(p.nics())
    if isinstance(hosts, bool) or not isinstance(hosts, int) or not 1 <= hosts <= MAX_HOSTS:
        raise ClusterError(f"--hosts {hosts}: a cluster has 1..{MAX_HOSTS} hosts")
    gpus = ngpus if gpus is None else gpus
    nics = nnics if nics is None else nics
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= min(ngpus, MAX_GPUS):
        raise ClusterError(f"--gpus {gpus}: preset {p.name} has {ngpus} GPUs per host; "
                           f"choose 1..{min(ngpus, MAX_GPUS)}")
    if isinstance(nics, bool) or not isinstance(nics, int) or not 0 <= nics <= min(nnics, MAX_NICS):
        raise ClusterError(f"--nics {nics}: preset {p.name} has {nnics} NICs per host; "
                           f"choose 0..{min(nnics, MAX_NICS)}")
    return Cluster(p.name, tuple(build_host(p, i, gpus, nics, catalog, sys_pci_devices)
                                 for i in range(hosts)))


def build_host(p: Preset, index: int, ngpus: int, nnics: int, catalog: GpuCatalog,
               sys_pci_devices: Path = SYS_PCI_DEVICES) -> Host:
    gpu_specs = p.gpus()[:ngpus]
    nic_specs = p.nics()[:nnics]
    gpu_index = {g.bus: i for i, g in enumerate(gpu_specs)}
    nic_index = {n.bus: i for i, n in enumerate(nic_specs)}
    all_buses = (*p.nvswitches, *p.switch_buses(), *(g.bus for g in p.gpus()),
                 *(n.bus for n in p.nics()))
    domain = host_domain(index, all_buses, sys_pci_devices)

    def addr(bus: int) -> PciAddress:
        return PciAddress(domain, bus)

    gpus: dict[int, Gpu] = {}
    nics: dict[int, Nic] = {}
    switches: list[PciSwitch] = []

    def make_gpu(g: GpuSpec, numa: int) -> Gpu:
        model = catalog.get(g.model)
        links = tuple(
            NvLink(addr(t), count, PCI_CLASS_NVSWITCH if t in p.nvswitches else PCI_CLASS_GPU)
            for t, count in g.nvlinks if t in p.nvswitches or t in gpu_index)
        if sum(link.count for link in links) > model.nvlinks:
            raise ClusterError(f"preset {p.name}: GPU {g.bus:#04x} lists "
                               f"{sum(link.count for link in links)} NVLinks but a {model.key} "
                               f"has {model.nvlinks}")
        i = gpu_index[g.bus]
        return Gpu(index=i, model=model.key, bus_id=addr(g.bus), numa_node=numa,
                   uuid=default_uuid(index, i),
                   identity=PciIdentity(NVIDIA_VENDOR, model.pci_device_id, NVIDIA_VENDOR,
                                        model.pci_subsystem_id),
                   link=g.link or PciLink(PCIE_LINK_SPEEDS[model.pcie_gen], model.pcie_width),
                   sm=model.sm, nvlinks=links)

    def make_nic(n: NicSpec, above: Optional[PciAddress]) -> Nic:
        i = nic_index[n.bus]
        try:
            name = n.name.format(index=i)
        except (KeyError, IndexError, ValueError) as e:
            raise ClusterError(f"preset {p.name}: NIC name {n.name!r}: only {{index}} may be "
                               f"substituted ({e})") from e
        return Nic(index=i, name=name, bus_id=addr(n.bus), speed_mbps=n.speed_mbps,
                   guid=default_nic_guid(index, i), switch=above, transport=n.transport,
                   identity=n.identity, link=n.link, port=n.port, latency_us=n.latency_us,
                   max_conn=n.max_conn, gdr=n.gdr)

    def children(node_gpus: Sequence[GpuSpec], node_nics: Sequence[NicSpec],
                 node_switches: Sequence[SwitchSpec], numa: int,
                 above: Optional[PciAddress]) -> tuple[PciAddress, ...]:
        """Kept devices below one node, in bus order; switches left empty vanish."""
        out: list[int] = []
        for g in node_gpus:
            if g.bus in gpu_index:
                gpus[g.bus] = make_gpu(g, numa)
                out.append(g.bus)
        for n in node_nics:
            if n.bus in nic_index:
                nics[n.bus] = make_nic(n, above)
                out.append(n.bus)
        for s in node_switches:
            below = children(s.gpus, s.nics, s.switches, numa, addr(s.bus))
            if below:
                switches.append(PciSwitch(addr(s.bus), s.identity, s.link, below))
                out.append(s.bus)
        return tuple(addr(b) for b in sorted(out))

    nr_cpus = len(p.sockets) * p.cpu.cores_per_socket * p.cpu.threads_per_core
    sockets = []
    for pos, s in enumerate(p.sockets):
        below = children(s.gpus, s.nics, s.switches, s.numa_id, None)
        cpus = socket_cpus(pos, len(p.sockets), p.cpu.cores_per_socket, p.cpu.threads_per_core)
        affinity = s.affinity or cpumask(cpus, nr_cpus)
        # A socket with nothing left below it stays: NCCL trims it, and the
        # CPUs it describes are still part of the host.
        sockets.append(CpuSocket(s.numa_id, affinity, p.cpu.arch, p.cpu.vendor, p.cpu.family_id,
                                 p.cpu.model_id, below))
    return Host(
        index=index, hostname=host_name(index), host_id=host_name(index), domain=domain,
        sockets=tuple(sockets), switches=tuple(sorted(switches, key=lambda s: s.bus_id)),
        gpus=tuple(sorted(gpus.values(), key=lambda g: g.index)),
        nvswitches=tuple(NvSwitch(addr(b)) for b in p.nvswitches),
        nics=tuple(sorted(nics.values(), key=lambda n: n.index)),
        multicast=_multicast(p, catalog), collnet=p.collnet and bool(nics))


def _multicast(p: Preset, catalog: GpuCatalog) -> bool:
    """The preset's choice, checked against the hardware: see multicast_possible."""
    odd = _without_multicast(p, catalog)
    if p.multicast and odd is not None:
        index, model = odd
        raise ClusterError(f"preset {p.name}: multicast needs every GPU on NVSwitches and a model "
                           f"that supports it; GPU {index} ({model}) is not")
    return odd is None if p.multicast is None else p.multicast


def multicast_possible(p: Preset, catalog: GpuCatalog) -> bool:
    """NVSwitch multicast (NVLink SHARP) where the hardware has it: GPUs that
    support it (sm90+: H100, H200) all on NVSwitches (gen 3+ offer it). What a
    preset without a `multicast` key gets; one may turn it off (no fabric
    manager, a switch generation without it), never on elsewhere."""
    return _without_multicast(p, catalog) is None


def _without_multicast(p: Preset, catalog: GpuCatalog) -> Optional[tuple[int, str]]:
    """The first GPU (index on the host, model) that cannot join multicast."""
    for i, g in enumerate(p.gpus()):
        if not (catalog.get(g.model).multicast and any(t in p.nvswitches for t, _ in g.nvlinks)):
            return i, g.model
    return None
