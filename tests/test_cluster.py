"""The cluster model: the dgx-h100 preset, overrides and their errors, the preset
file format, the platform file derived from a host, and per-host artefacts."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ncclsim import NcclsimError
from ncclsim.cluster import (
    ClusterError, PresetFormatError, UnknownPresetError, available_presets, build_cluster,
    load_preset, platform_config)
from ncclsim.topology.host_artifacts import write_host_artifacts
from ncclsim.cluster.cpumask import cpumask, socket_cpus
from ncclsim.cluster.model import PCI_CLASS_GPU, PCI_CLASS_NVSWITCH, PciSwitch
from ncclsim.cluster.presets import find_preset
from ncclsim.platform.config import default_nic_guid, default_uuid, format_platform, read_platform
from ncclsim.platform.models import GpuCatalog
from ncclsim.platform.pci import PciAddress
from ncclsim.topology.validate import validate_topology

# dgx-h100-layout.md section 2: bare-metal HGX/DGX H100 bus numbers.
GPU_BUSES = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]
NVSWITCH_BUSES = [0x05, 0x06, 0x07, 0x08]


@pytest.fixture
def dgx(no_sys_pci: Path) -> Any:
    def make(**kw: Any) -> Any:
        return build_cluster("dgx-h100", sys_pci_devices=no_sys_pci, **kw)
    return make


def preset_doc() -> dict[str, Any]:
    return yaml.safe_load(find_preset("dgx-h100").read_text())


def write_preset(tmp_path: Path, doc: dict[str, Any], name: str = "custom") -> Path:
    doc = {**doc, "name": name}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


# ---- the dgx-h100 preset ----

def test_default_preset_is_dgx_h100(no_sys_pci: Path) -> None:
    assert "dgx-h100" in available_presets()
    assert build_cluster(sys_pci_devices=no_sys_pci).preset == "dgx-h100"


def test_dgx_h100_shape(dgx: Any) -> None:
    (host,) = dgx().hosts
    assert [g.bus_id for g in host.gpus] == [PciAddress(0, b) for b in GPU_BUSES]
    assert [g.index for g in host.gpus] == list(range(8))
    assert {g.model for g in host.gpus} == {"h100"} and {g.sm for g in host.gpus} == {90}
    assert [g.numa_node for g in host.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [s.bus_id for s in host.nvswitches] == [PciAddress(0, b) for b in NVSWITCH_BUSES]
    for g in host.gpus:
        assert g.nvlink_count == 18
        assert [(link.target.bus, link.count, link.tclass) for link in g.nvlinks] == [
            (0x05, 5, PCI_CLASS_NVSWITCH), (0x06, 5, PCI_CLASS_NVSWITCH),
            (0x07, 4, PCI_CLASS_NVSWITCH), (0x08, 4, PCI_CLASS_NVSWITCH)]
    assert [n.name for n in host.nics] == [f"mlx5_{i}" for i in range(8)]
    assert {n.speed_mbps for n in host.nics} == {400000}
    assert {n.transport for n in host.nics} == {"ib"}
    assert len(host.sockets) == 2
    assert {(s.arch, s.vendor, s.family_id, s.model_id) for s in host.sockets} == {
        ("x86_64", "GenuineIntel", 6, 143)}
    assert [s.numa_id for s in host.sockets] == [0, 1]


def test_dgx_h100_one_gpu_and_one_nic_per_switch(dgx: Any) -> None:
    (host,) = dgx().hosts
    assert len(host.switches) == 8
    for g, n in zip(host.gpus, host.nics):
        switch = host.device(n.switch)
        assert isinstance(switch, PciSwitch)
        assert set(switch.children) == {g.bus_id, n.bus_id}
        assert switch.bus_id.bus == g.bus_id.bus - 2 and n.bus_id.bus == g.bus_id.bus + 1
        assert switch.link.speed == "32.0 GT/s PCIe" and switch.link.width == 16
    assert host.sockets[0].children == tuple(s.bus_id for s in host.switches[:4])
    assert host.sockets[1].children == tuple(s.bus_id for s in host.switches[4:])


def test_dgx_h100_cpu_affinity(dgx: Any) -> None:
    """2 x 56 cores x 2 threads, numbered as Linux does: socket 0 owns 0-55 and 112-167."""
    s0, s1 = dgx().hosts[0].sockets
    assert s0.affinity == "00000000,000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff"
    assert s1.affinity == "ffffffff,ffffff00,00000000,0000ffff,ffffffff,ff000000,00000000"


def test_cpumask_matches_linux() -> None:
    # A real 2 x 48-core node 0 (dgx-h100-layout.md section 4, [SIMAI]).
    cpus = socket_cpus(0, sockets=2, cores_per_socket=48, threads_per_core=2)
    assert cpumask(cpus, 192) == "00000000,0000ffff,ffffffff,00000000,0000ffff,ffffffff"
    # The top word is only as wide as the CPUs it holds, like /sys's cpumap.
    assert cpumask(range(4), 40) == "00,0000000f"
    assert cpumask([1], 4) == "2"
    with pytest.raises(ValueError):
        cpumask([40], 40)


# ---- hosts ----

def test_hosts_have_their_own_identity(dgx: Any) -> None:
    cluster = dgx(hosts=3)
    assert [h.hostname for h in cluster.hosts] == ["ncclsim-h0", "ncclsim-h1", "ncclsim-h2"]
    assert [h.host_id for h in cluster.hosts] == ["ncclsim-h0", "ncclsim-h1", "ncclsim-h2"]
    assert [h.domain for h in cluster.hosts] == [0, 1, 2]
    for h in cluster.hosts:
        assert {b.domain for b in h.bus_ids()} == {h.domain}
        assert [g.uuid for g in h.gpus] == [default_uuid(h.index, i) for i in range(8)]
        assert [n.guid for n in h.nics] == [default_nic_guid(h.index, i) for i in range(8)]
    assert len({g.uuid for h in cluster.hosts for g in h.gpus}) == 24
    assert len({n.guid for h in cluster.hosts for n in h.nics}) == 24


def test_domain_moves_off_real_pci_devices(no_sys_pci: Path) -> None:
    (no_sys_pci / "0000:19:00.0").mkdir()  # a real device at host 0's first NIC
    h0, h1 = build_cluster(hosts=2, sys_pci_devices=no_sys_pci).hosts
    assert (h0.domain, h1.domain) == (0x100, 1)
    assert {b.domain for b in h0.bus_ids()} == {0x100}


# ---- overrides ----

def test_fewer_gpus_keep_the_first_ones_and_their_switches(dgx: Any) -> None:
    (host,) = dgx(gpus=3, nics=3).hosts
    assert [g.bus_id.bus for g in host.gpus] == GPU_BUSES[:3]
    assert [n.name for n in host.nics] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert [s.bus_id.bus for s in host.switches] == [0x16, 0x28, 0x38]
    assert host.sockets[1].children == ()
    assert all(g.nvlink_count == 18 for g in host.gpus)


def test_gpus_and_nics_are_independent(dgx: Any) -> None:
    (host,) = dgx(gpus=2).hosts
    assert len(host.gpus) == 2 and len(host.nics) == 8
    # Switches whose GPU went stay for their NIC.
    assert len(host.switches) == 8
    (host,) = dgx(gpus=8, nics=0).hosts
    assert host.nics == () and len(host.switches) == 8


@pytest.mark.parametrize("kw,message", [
    ({"hosts": 0}, r"--hosts 0: a cluster has 1\.\.65536 hosts"),
    ({"hosts": 65537}, r"--hosts 65537"),
    ({"gpus": 9}, r"--gpus 9: preset dgx-h100 has 8 GPUs per host; choose 1\.\.8"),
    ({"gpus": 0}, r"--gpus 0"),
    ({"nics": 9}, r"--nics 9: preset dgx-h100 has 8 NICs per host; choose 0\.\.8"),
    ({"nics": -1}, r"--nics -1"),
])
def test_impossible_shapes(dgx: Any, kw: dict[str, int], message: str) -> None:
    with pytest.raises(ClusterError, match=message):
        dgx(**kw)


def test_unknown_preset_names_the_available_ones(tmp_path: Path) -> None:
    with pytest.raises(UnknownPresetError, match=r"unknown preset 'dgx-z9'.*dgx-h100"):
        build_cluster("dgx-z9")
    with pytest.raises(UnknownPresetError, match="does not exist"):
        build_cluster(str(tmp_path / "missing.yaml"))
    assert issubclass(UnknownPresetError, NcclsimError)


# ---- preset files ----

def test_preset_by_path(tmp_path: Path, no_sys_pci: Path) -> None:
    path = write_preset(tmp_path, preset_doc())
    assert build_cluster(str(path), sys_pci_devices=no_sys_pci).preset == "custom"
    assert available_presets([tmp_path]) == ["custom"]
    assert load_preset("custom", [tmp_path]).source == path


def test_pcie_only_host_with_direct_nvlinks(tmp_path: Path, no_sys_pci: Path) -> None:
    """GPUs and NICs on root ports, NVLink bridges between GPU pairs."""
    doc = preset_doc()
    del doc["nvswitches"], doc["gpu_nvlinks"]
    doc["sockets"] = [
        {"numaid": 0, "gpus": [{"bus": 0x41, "nvlinks": [[0x42, 4]]},
                               {"bus": 0x42, "nvlinks": [[0x41, 4]]}], "nics": [0x43]},
        {"numaid": 1, "gpus": [0x81],
         "nics": [{"bus": 0x83, "transport": "ethernet", "speed": 100000}]},
    ]
    path = write_preset(tmp_path, doc)
    (host,) = build_cluster(str(path), sys_pci_devices=no_sys_pci).hosts
    assert host.switches == () and host.nvswitches == ()
    assert [(link.target.bus, link.count, link.tclass) for link in host.gpus[0].nvlinks] == [
        (0x42, 4, PCI_CLASS_GPU)]
    assert host.gpus[2].nvlinks == ()
    assert [(n.switch, n.transport, n.speed_mbps) for n in host.nics] == [
        (None, "ib", 400000), (None, "ethernet", 100000)]
    # Dropping a GPU drops the NVLinks that pointed at it.
    (host,) = build_cluster(str(path), gpus=1, sys_pci_devices=no_sys_pci).hosts
    assert host.gpus[0].nvlinks == ()


@pytest.mark.parametrize("edit,message", [
    (lambda d: d.update(format=2), r"format 2 is not supported"),
    (lambda d: d.update(extra=1), r"top level: unknown key\(s\) extra"),
    (lambda d: d["cpu"].pop("modelid"), r"cpu: missing key 'modelid'"),
    (lambda d: d["nic"].update(speed="fast"), r"speed: expected an integer"),
    (lambda d: d["nic"].update(transport="roce"), r"transport: expected one of ib, ethernet"),
    (lambda d: d["pci_switch"].update(link_speed="32 GT/s PCIe"), r"link_speed: expected one of"),
    (lambda d: d["sockets"][0]["switches"][0].update(gpus=[0x2a]),
     r"bus 0x2a is used twice \(GPU and GPU\)"),
    (lambda d: d["sockets"][1]["switches"][0].update(bus=0x05),
     r"bus 0x05 is used twice \(NVSwitch and switch\)"),
    (lambda d: d["sockets"][0]["switches"][0].update(gpus=[{"bus": 0x18, "nvlinks": [[0x99, 2]]}]),
     r"GPU 0x18: NVLink target 0x99 is neither an NVSwitch nor another GPU"),
    (lambda d: d["sockets"][0]["switches"][1].update(gpus=[], nics=[]),
     r"sockets\[0\].switches\[1\]: a switch needs at least one GPU, NIC or switch"),
    (lambda d: d["sockets"][0]["switches"][2].update(gpu=[0x3a]),
     r"sockets\[0\].switches\[2\]: unknown key\(s\) gpu"),
    (lambda d: d["sockets"][0]["switches"][3]["nics"].__setitem__(0, {"bus": 0x5e, "port": 0}),
     r"nics\[0\].port: expected an integer 1\.\.255"),
])
def test_preset_format_errors(tmp_path: Path, edit: Any, message: str) -> None:
    doc = preset_doc()
    edit(doc)
    path = write_preset(tmp_path, doc)
    with pytest.raises(PresetFormatError, match=message) as err:
        load_preset(str(path))
    assert str(path) in str(err.value)


def test_preset_name_must_match_file(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump(preset_doc()))
    with pytest.raises(PresetFormatError, match="must match the file name 'other'"):
        load_preset(str(path))


def test_multicast_where_the_hardware_has_it(tmp_path: Path, no_sys_pci: Path) -> None:
    """H100s on NVSwitches have NVSwitch multicast unless the preset turns it
    off; a preset cannot claim it for GPUs without it."""
    (host,) = build_cluster(str(write_preset(tmp_path, preset_doc())), sys_pci_devices=no_sys_pci).hosts
    assert host.multicast is True
    doc = preset_doc()
    doc["multicast"] = False
    (host,) = build_cluster(str(write_preset(tmp_path, doc)), sys_pci_devices=no_sys_pci).hosts
    assert host.multicast is False
    assert "multicast = 0" in format_platform(platform_config(host))
    doc.update(multicast=True, gpu_model="a100", gpu_nvlinks=[[0x05, 3], [0x06, 3], [0x07, 3], [0x08, 3]])
    with pytest.raises(ClusterError, match=r"multicast needs every GPU on NVSwitches .* GPU 0 \(a100\)"):
        build_cluster(str(write_preset(tmp_path, doc)), sys_pci_devices=no_sys_pci)
    doc["multicast"] = "yes"
    with pytest.raises(PresetFormatError, match="multicast"):
        load_preset(str(write_preset(tmp_path, doc)))


def test_collnet_from_the_preset_or_the_launch(tmp_path: Path, no_sys_pci: Path) -> None:
    """In-network reduction is the fabric's: off unless the preset or the
    launch says so, and only on hosts with NICs."""
    doc = preset_doc()
    path = write_preset(tmp_path, doc)
    assert [h.collnet for h in build_cluster(str(path), hosts=2, sys_pci_devices=no_sys_pci).hosts] == [False] * 2
    assert all(h.collnet for h in build_cluster(str(path), hosts=2, collnet=True, sys_pci_devices=no_sys_pci).hosts)
    doc["collnet"] = True
    path = write_preset(tmp_path, doc)
    (host,) = build_cluster(str(path), sys_pci_devices=no_sys_pci).hosts
    assert host.collnet and "collnet = 1" in format_platform(platform_config(host))
    (host,) = build_cluster(str(path), nics=0, sys_pci_devices=no_sys_pci).hosts
    assert not host.collnet
    (host,) = build_cluster(str(path), collnet=False, sys_pci_devices=no_sys_pci).hosts
    assert not host.collnet


def test_too_many_nvlinks_for_the_model(tmp_path: Path, no_sys_pci: Path) -> None:
    doc = preset_doc()
    doc["gpu_model"] = "a100"  # 12 NVLinks
    path = write_preset(tmp_path, doc)
    with pytest.raises(ClusterError, match="lists 18 NVLinks but a a100 has 12"):
        build_cluster(str(path), sys_pci_devices=no_sys_pci)


# ---- the model checks itself ----

def test_inconsistent_host_is_rejected(dgx: Any) -> None:
    (host,) = dgx().hosts
    g0, g1 = host.gpus[:2]
    with pytest.raises(ClusterError, match="bus id 0000:2a:00.0 is used twice"):
        dataclasses.replace(host, gpus=(g0, dataclasses.replace(g1, index=1, bus_id=g1.bus_id), g1,
                                        *host.gpus[2:]))
    with pytest.raises(ClusterError, match="outside the host's PCI domain 0000"):
        elsewhere = dataclasses.replace(g0, bus_id=PciAddress(1, 0x18))
        dataclasses.replace(host, gpus=(elsewhere, *host.gpus[1:]))
    with pytest.raises(ClusterError, match="GPU 0 says NUMA node 1 but sits under socket 0"):
        dataclasses.replace(host, gpus=(dataclasses.replace(g0, numa_node=1), *host.gpus[1:]))
    with pytest.raises(ClusterError, match="NIC mlx5_0 says it is behind None"):
        moved = dataclasses.replace(host.nics[0], switch=None)
        dataclasses.replace(host, nics=(moved, *host.nics[1:]))
    with pytest.raises(ClusterError, match="NIC guids must be unique"):
        twin = dataclasses.replace(host.nics[1], guid=host.nics[0].guid)
        dataclasses.replace(host, nics=(host.nics[0], twin, *host.nics[2:]))


# ---- platform file ----

def test_platform_config_from_host(dgx: Any, catalog: GpuCatalog, tmp_path: Path) -> None:
    host = dgx(hosts=2).hosts[1]
    cfg = platform_config(host, catalog)
    assert (cfg.host_index, cfg.hostname) == (1, "ncclsim-h1")
    assert [g.bus_id for g in cfg.gpus] == [g.bus_id for g in host.gpus]
    assert [g.uuid for g in cfg.gpus] == [default_uuid(1, i) for i in range(8)]
    assert [g.numa_node for g in cfg.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {g.memory for g in cfg.gpus} == {catalog.get("h100").total_memory}
    links = cfg.gpus[0].nvlink_remote
    assert len(links) == 18
    assert [links.count(PciAddress(1, b)) for b in NVSWITCH_BUSES] == [5, 5, 4, 4]
    assert [(n.name, n.bus_id, n.speed_mbps, n.guid) for n in cfg.nics] == [
        (n.name, n.bus_id, 400000, default_nic_guid(1, n.index)) for n in host.nics]
    cfg.validate(catalog)


# ---- artefacts ----

def test_write_host_artifacts(dgx: Any, catalog: GpuCatalog, tmp_path: Path) -> None:
    cluster = dgx(hosts=2)
    arts = write_host_artifacts(cluster, tmp_path / "hosts", catalog)
    dirs = [tmp_path / "hosts" / f"h{i}" for i in (0, 1)]
    assert [a.files.directory for a in arts] == dirs
    assert [a.topo_xml for a in arts] == [d / "topo.xml" for d in dirs]
    assert [a.platform_conf for a in arts] == [d / "platform.conf" for d in dirs]
    for a, host in zip(arts, cluster.hosts):
        assert a.host == host
        assert read_platform(a.platform_conf, catalog) == platform_config(host, catalog)
        validate_topology(a.topo_xml.read_text(), domain=host.domain)
        env = {"NCCLSIM_PLATFORM": str(a.platform_conf), "NCCL_TOPO_FILE": str(a.topo_xml),
               "NCCL_HOSTID": host.host_id, "NCCLSIM_HOSTNAME": host.hostname,
               "NCCLSIM_TIME_BOARD": str(a.files.directory / "time-board"),
               "NCCLSIM_WAKE_BOARD": str(a.files.directory / "wake-board"),
               "NCCLSIM_DELIVERY_BOARD": str(a.files.directory / "delivery-board")}
        assert a.environment() == env
        # The same, as the `export` lines rank.sh sources: read back by a shell.
        shown = subprocess.run(["sh", "-c", f". {a.files.env} && env"], capture_output=True, text=True,
                               check=True, env={}).stdout.splitlines()
        assert {k: v for k, _, v in (line.partition("=") for line in shown) if k in env} == env
    # Writing again leaves identical files.
    before = [a.topo_xml.read_text() for a in arts]
    write_host_artifacts(cluster, tmp_path / "hosts", catalog)
    assert [a.topo_xml.read_text() for a in arts] == before
