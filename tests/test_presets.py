"""Every preset of topologies/: it is the machine its documentation describes,
its XML validates, and unmodified NCCL, loading host 0's files in one process
over all of its GPUs, dumps the same machine back."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lxml import etree

from ncclsim.cluster import Host, available_presets, build_cluster
from ncclsim.topology.host_artifacts import HostArtifacts
from ncclsim.paths import cudart_lib_dir, nccl_lib_dir
from ncclsim.platform.config import read_platform
from ncclsim.platform.env import with_host_preload
from ncclsim.topology.host_artifacts import write_host_artifacts
from ncclsim.topology.validate import validate_topology
from ncclsim.topology.xml_writer import render_topology

NET_PLUGIN = "libnccl-net-ncclsim.so"


@dataclass(frozen=True)
class Expected:
    """One host of a preset, as docs/presets.md describes it."""
    model: str
    gpus: int
    nvlinks_per_gpu: int
    nvswitches: int
    nics: int
    nic_mbps: int
    pci_switches: int
    sockets: int
    cpu_vendor: str
    multicast: bool  # NVSwitch multicast (NVLS)


EXPECTED = {
    "dgx-h100": Expected("h100", 8, 18, 4, 8, 400_000, 8, 2, "GenuineIntel", True),
    "dgx-a100": Expected("a100", 8, 12, 6, 8, 200_000, 12, 2, "AuthenticAMD", False),
    "hgx-h100-4nic": Expected("h100", 8, 18, 4, 4, 400_000, 4, 2, "GenuineIntel", True),
    "pcie-l40s": Expected("l40s", 8, 0, 0, 2, 200_000, 4, 2, "GenuineIntel", False),
    "dgx-h200": Expected("h200", 8, 18, 4, 8, 400_000, 8, 2, "GenuineIntel", True),
    "dgx-b200": Expected("b200", 8, 18, 2, 8, 400_000, 4, 2, "GenuineIntel", True),
}
PRESETS = sorted(EXPECTED)


def test_every_preset_is_described_here() -> None:
    assert sorted(available_presets()) == PRESETS, "describe every preset in EXPECTED"


# ---- the model ----

def _host(preset: str, sys_pci: Path, index: int = 0, **cut: int) -> Host:
    return build_cluster(preset, hosts=index + 1, sys_pci_devices=sys_pci, **cut).hosts[index]


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_is_the_documented_machine(preset: str, no_sys_pci: Path) -> None:
    want, host = EXPECTED[preset], _host(preset, no_sys_pci)
    assert {g.model for g in host.gpus} == {want.model}
    assert len(host.gpus) == want.gpus
    assert [g.nvlink_count for g in host.gpus] == [want.nvlinks_per_gpu] * want.gpus
    assert len(host.nvswitches) == want.nvswitches
    assert [n.speed_mbps for n in host.nics] == [want.nic_mbps] * want.nics
    assert len(host.switches) == want.pci_switches
    assert len(host.sockets) == want.sockets
    assert {s.vendor for s in host.sockets} == {want.cpu_vendor}
    assert host.multicast is want.multicast
    # GPUs split evenly over the sockets, as on every board described.
    per_socket = [sum(g.numa_node == s.numa_id for g in host.gpus) for s in host.sockets]
    assert per_socket == [want.gpus // want.sockets] * want.sockets


def test_shared_nics_sit_beside_their_gpu_pair(no_sys_pci: Path) -> None:
    host = _host("hgx-h100-4nic", no_sys_pci)
    for nic in host.nics:
        below = host.device(nic.switch).children  # type: ignore[union-attr, arg-type]
        assert sum(b in {g.bus_id for g in host.gpus} for b in below) == 2


def test_dgx_b200_is_nvlink5_with_two_gpus_and_nics_per_switch(no_sys_pci: Path) -> None:
    host = _host("dgx-b200", no_sys_pci)
    assert {g.sm for g in host.gpus} == {100}
    # 9 of each GPU's 18 NVLinks to each of the 2 NVLink 5 switches
    assert {tuple(link.count for link in g.nvlinks) for g in host.gpus} == {(9, 9)}
    for switch in host.switches:
        below = set(host.device(switch.bus_id).children)  # type: ignore[union-attr]
        assert len(below & {g.bus_id for g in host.gpus}) == 2
        assert len(below & {n.bus_id for n in host.nics}) == 2
    assert {s.model_id for s in host.sockets} == {0xCF}  # Emerald Rapids


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("cut", [{}, {"gpus": 3, "nics": 1}, {"gpus": 1, "nics": 0}])
def test_preset_xml_validates(preset: str, cut: dict[str, int], no_sys_pci: Path) -> None:
    host = _host(preset, no_sys_pci, index=1, **cut)
    validate_topology(render_topology(host, preset), domain=host.domain, source=preset)


# ---- what NCCL makes of it ----

def _probe_env(clean_env: dict[str, str], lib_dir: Path, art: HostArtifacts,
               work: Path) -> dict[str, str]:
    """The environment of one process driving every GPU of host 0."""
    return {**clean_env, **art.environment(),
            "LD_LIBRARY_PATH": ":".join(map(str, [lib_dir, nccl_lib_dir(), cudart_lib_dir()])),
            "LD_PRELOAD": with_host_preload(""),
            "NCCL_NET_PLUGIN": str(lib_dir / NET_PLUGIN), "NCCL_NET": "ncclsim",
            "NCCL_SOCKET_IFNAME": "lo", "NCCL_TOPO_DUMP_FILE": str(work / "dump.xml"),
            "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,NET",
            "NCCL_DEBUG_FILE": str(work / "nccl.log")}


def _sys_lookups(log: str) -> set[str]:
    """Bus ids NCCL looked for in /sys (it does so for every GPU and switch of a
    file, so that a real device would win; a simulated one is never there)."""
    pattern = r"Could not find real path of /sys/class/pci_bus/[^/]+/\.\./\.\./(\S+)"
    return set(re.findall(pattern, log))


@dataclass(frozen=True)
class NcclView:
    host: Host
    log: str
    ours: Any  # our topo.xml
    dump: Any  # NCCL_TOPO_DUMP_FILE


@pytest.fixture(scope="module", params=PRESETS)
def nccl_view(request: pytest.FixtureRequest, lib_dir: Path,
              tmp_path_factory: pytest.TempPathFactory) -> NcclView:
    """One NCCL run per preset, shared by the tests that read it."""
    assert (lib_dir / NET_PLUGIN).exists(), f"{lib_dir / NET_PLUGIN} is missing: build fake_cuda/net"
    tmp_path = tmp_path_factory.mktemp(request.param)
    # As conftest's clean_env, which is per test: no simulator variables, a private cache.
    clean_env = {k: v for k, v in os.environ.items()
                 if not k.startswith(("NCCLSIM_", "NCCL_", "CUDA_"))}
    clean_env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    # Bus ids chosen off the real /sys, as for a run on this machine.
    (art,) = write_host_artifacts(build_cluster(request.param, hosts=1), tmp_path / "topo")
    gpus = len(art.host.gpus)
    proc = subprocess.run(
        [sys.executable, "-m", "ncclsim.probe", "--gpus-per-process", str(gpus)],
        env=_probe_env(clean_env, lib_dir, art, tmp_path), capture_output=True, text=True,
        timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert read_platform(art.platform_conf).gpus  # the file the driver read
    return NcclView(art.host, (tmp_path / "nccl.log").read_text(),
                    etree.parse(str(art.topo_xml)).getroot(),
                    etree.parse(str(tmp_path / "dump.xml")).getroot())


@pytest.mark.e2e
def test_nccl_loads_the_file_without_asking_sys(nccl_view: NcclView) -> None:
    host, log = nccl_view.host, nccl_view.log
    assert "Loading topology file" in log and "Loaded net plugin ncclsim" in log
    assert "Topology detection : could not read" not in log
    assert "assuming NVSwitch" not in log
    assert not [line for line in log.splitlines() if "WARN" in line and "graph/" in line]
    looked_up = _sys_lookups(log)
    assert not looked_up & {str(s.bus_id) for s in host.nvswitches}
    assert not looked_up & {str(n.bus_id) for n in host.nics}
    assert looked_up <= {str(g.bus_id) for g in host.gpus} | {str(s.bus_id) for s in host.switches}


@pytest.mark.e2e
def test_nccl_dump_is_the_preset(nccl_view: NcclView) -> None:
    host, dump = nccl_view.host, nccl_view.dump
    # GPUs, with the NVLinks of the preset (none on PCIe boards).
    gpus = dump.findall(".//gpu")
    assert sorted(int(g.get("dev")) for g in gpus) == list(range(len(host.gpus)))
    for g in gpus:
        model = host.gpus[int(g.get("dev"))]
        assert g.getparent().get("busid") == str(model.bus_id)
        links = g.findall("nvlink")
        assert sum(int(n.get("count")) for n in links) == model.nvlink_count
        assert {n.get("target") for n in links} == {str(link.target) for link in model.nvlinks}
    # NICs: the net plugin's, placed where the file puts them, at their speed.
    nets = dump.findall(".//net")
    assert [n.get("name") for n in nets] == [n.name for n in host.nics]
    for net, nic in zip(nets, host.nics):
        pci = net.getparent().getparent()
        assert pci.get("busid") == str(nic.bus_id)
        assert pci.getparent().get("busid") == (str(nic.switch) if nic.switch else None)
        assert (net.get("speed"), net.get("port")) == (str(nic.speed_mbps), str(nic.port))
    # PCI switches, where the file nests them; CPUs with our attributes.
    switches = {p.get("busid"): p.getparent().get("busid") for p in dump.iter("pci")
                if p.get("class") == "0x060400"}
    assert switches == {p.get("busid"): p.getparent().get("busid")
                        for p in nccl_view.ours.iter("pci") if p.get("class") == "0x060400"}
    assert len(switches) == len(host.switches)
    for cpu in nccl_view.ours.findall("cpu"):
        dumped = dump.find(f"cpu[@numaid='{cpu.get('numaid')}']")
        if len(cpu):  # NCCL drops a socket with nothing below it
            assert {k: dumped.get(k) for k in cpu.attrib} == dict(cpu.attrib)
