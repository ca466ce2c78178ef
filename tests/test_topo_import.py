"""`ncclsim topo import`: NCCL topology XML (NCCL's dump, hand-written files)
and `nvidia-smi topo -m` output to a cluster spec. The round trip is checked
through unmodified NCCL: a preset's dump, imported and generated again, gives
NCCL's same dump. Inputs written for these tests: tests/data/topo-import/."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Union

import pytest
from lxml import etree

from ncclsim.cluster.model import CpuSocket, Host, PciSwitch
from ncclsim.cluster.platform_config import platform_config
from ncclsim.paths import cudart_lib_dir, nccl_lib_dir
from ncclsim.platform.env import with_host_preload
from ncclsim.platform.pci import PciAddress
from ncclsim.platform.models import GpuCatalog
from ncclsim.topology.importers import ImportResult, import_topology
from ncclsim.topology.importers.reference import model_by_device, model_by_sm

RunCli = Callable[..., "subprocess.CompletedProcess[str]"]

DATA = Path(__file__).resolve().parent / "data" / "topo-import"
REPORT_DUMP = Path(__file__).resolve().parent / "data" / "report" / "two-hosts" / "topo.xml"
NET_PLUGIN = "libnccl-net-ncclsim.so"


def _one_error_line(proc: "subprocess.CompletedProcess[str]", fragment: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert re.search(fragment, lines[0]), lines[0]
    assert proc.stdout == ""


def _import(path: Path, tmp_path: Path, gpu_model: Optional[str] = None) -> ImportResult:
    return import_topology(path, tmp_path / "imported.yaml", gpu_model)


# ---- NCCL's view of a host ----

def _generate(run_cli: RunCli, out: str, *source: str) -> dict[str, Any]:
    proc = run_cli("topo", "generate", *source, "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"]
    return host  # type: ignore[no-any-return]


def _nccl_dump(host: dict[str, Any], clean_env: dict[str, str], lib_dir: Path,
               dump: Path) -> Path:
    """NCCL_TOPO_DUMP_FILE of one process driving every GPU of the generated host."""
    env = {**clean_env, **host["env"],
           "LD_LIBRARY_PATH": ":".join(map(str, [lib_dir, nccl_lib_dir(), cudart_lib_dir()])),
           "LD_PRELOAD": with_host_preload(""), "NCCL_NET_PLUGIN": str(lib_dir / NET_PLUGIN),
           "NCCL_NET": "ncclsim", "NCCL_SOCKET_IFNAME": "lo", "NCCL_TOPO_DUMP_FILE": str(dump)}
    proc = subprocess.run(
        [sys.executable, "-m", "ncclsim.probe", "--gpus-per-process", str(host["gpus"]),
         "--ops", "allreduce", "--sizes", "8"],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return dump


def _structure(dump: Path) -> dict[str, Any]:
    """What the acceptance compares: GPUs (bus ids, NVLinks), NICs and where they
    sit, the switch tree, the CPUs with their affinity."""
    root = etree.parse(str(dump)).getroot()

    def parent(el: Any) -> str:
        p = el.getparent()
        return p.get("busid") if p.tag == "pci" else f"cpu{p.get('numaid')}"

    def pci(el: Any) -> tuple[Any, ...]:
        return tuple(el.get(k) for k in ("class", "vendor", "device", "subsystem_vendor",
                                         "subsystem_device", "link_speed", "link_width"))

    gpus = {g.getparent().get("busid"): (
        g.get("dev"), g.get("sm"), parent(g.getparent()), pci(g.getparent()),
        sorted((n.get("target"), n.get("count"), n.get("tclass")) for n in g.findall("nvlink")))
        for g in root.iter("gpu")}
    nics = {n.get("name"): (n.getparent().getparent().get("busid"),
                            parent(n.getparent().getparent()), pci(n.getparent().getparent()),
                            *(n.get(k) for k in ("dev", "speed", "port", "maxconn", "gdr")))
            for n in root.iter("net")}
    switches = {p.get("busid"): (parent(p), pci(p)) for p in root.iter("pci")
                if p.get("class") == "0x060400"}
    cpus = {c.get("numaid"): tuple(c.get(k) for k in ("affinity", "arch", "vendor", "familyid",
                                                       "modelid"))
            for c in root.findall("cpu")}
    return {"gpus": gpus, "nics": nics, "switches": switches, "cpus": cpus}


# ---- the round trip through NCCL ----

@pytest.mark.e2e
@pytest.mark.parametrize("preset", ["dgx-h100", "dgx-a100"])
def test_nccl_dump_round_trips(preset: str, run_cli: RunCli, tmp_path: Path,
                               clean_env: dict[str, str], lib_dir: Path) -> None:
    first = _nccl_dump(_generate(run_cli, "gen1", "--preset", preset), clean_env, lib_dir,
                       tmp_path / "dump1.xml")
    proc = run_cli("topo", "import", str(first), "-o", "imported.yaml")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{first} (NCCL topology XML) -> ")
    assert "note:" not in proc.stdout  # NCCL's dump says everything a spec holds
    second = _nccl_dump(_generate(run_cli, "gen2", "--spec", "imported.yaml"), clean_env,
                        lib_dir, tmp_path / "dump2.xml")
    want, got = _structure(first), _structure(second)
    assert len(want["gpus"]) == 8 and len(want["nics"]) == 8
    assert got == want
    # The spec is written as the presets are: defaults once, devices by bus number.
    spec = (tmp_path / "imported.yaml").read_text()
    assert "gpu_nvlinks:" in spec and 'name: "mlx5_{index}"' in spec
    assert "affinity" not in spec  # the preset's own CPU numbering gives NCCL's masks
    # A dump does not tell multicast; the spec says what the hardware has.
    assert f"multicast: {'true' if preset == 'dgx-h100' else 'false'}" in spec


@pytest.mark.e2e
def test_launch_topo_runs_the_file_as_its_import(run_cli: RunCli, tmp_path: Path) -> None:
    """launch --topo FILE --hosts 2 of a full 8 x H100 dump builds the rings and
    trees that `topo import` and launch --preset of the same file do, every
    host the file's machine, every inter-host connection on GPU Direct by the
    GPU's nearest NIC."""
    init_only = ["--", sys.executable, "-m", "ncclsim.probe"]
    env = {"NCCL_RUNTIME_CONNECT": "0"}
    proc = run_cli("launch", "--hosts", "1", "--run-dir", "one", *init_only, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dump = tmp_path / "one" / "topo-dump.xml"  # NCCL's own dump of the whole machine
    assert run_cli("topo", "import", str(dump), "-o", "machine.yaml").returncode == 0
    reports = {}
    for name, source in (("imported", ["--preset", "machine.yaml"]), ("topo", ["--topo", str(dump)])):
        proc = run_cli("launch", *source, "--hosts", "2", "--run-dir", name, *init_only, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        reports[name] = json.loads((tmp_path / name / "run.json").read_text())
    a, b = reports["imported"], reports["topo"]
    assert (b["nranks"], b["nnodes"]) == (16, 2)
    assert (b["rings"], b["trees"]) == (a["rings"], a["trees"]) and b["rings"]
    assert b["transports"]["inter_host"] == ["NET/ncclsim/GDRDMA"], b["transports"]
    assert all(c["ok"] for c in b["checks"]) and any("nearest NIC" in c["name"] for c in b["checks"])
    # Every host is the machine the file describes, as the import made it.
    assert "imported from topo-dump.xml" in (tmp_path / "topo" / "topo-spec.yaml").read_text()
    for h in (0, 1):
        ours = (tmp_path / "topo" / "hosts" / f"h{h}" / "topo.xml").read_text()
        assert ours == (tmp_path / "imported" / "hosts" / f"h{h}" / "topo.xml").read_text().replace(
            "machine", "topo-spec")


@pytest.mark.e2e
def test_import_a_launch_run_directory(run_cli: RunCli, tmp_path: Path) -> None:
    probe = ["--", sys.executable, "-m", "ncclsim.probe", "--ops", "allreduce", "--sizes", "8"]
    proc = run_cli("launch", "--hosts", "1", "--gpus", "4", "--run-dir", "run1", *probe,
                   timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # The run directory stands for its topo-dump.xml.
    proc = run_cli("topo", "import", "run1", "-o", "from-run.yaml", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["schema_version"], doc["input_kind"], doc["name"]) == (
        1, "NCCL topology XML", "from-run")
    assert doc["input"] == str(tmp_path / "run1" / "topo-dump.xml")
    # NCCL keeps every NIC but only the GPUs a rank used.
    assert (doc["gpus"], doc["nics"], doc["pci_switches"], doc["sockets"]) == (4, 8, 8, 2)
    assert doc["notes"] == [] and doc["renumbered"] == {}
    proc = run_cli("launch", "--preset", str(tmp_path / "from-run.yaml"), "--hosts", "1",
                   "--run-dir", "run2", *probe, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert _structure(tmp_path / "run2" / "topo-dump.xml") == _structure(
        tmp_path / "run1" / "topo-dump.xml")


@pytest.mark.e2e
def test_nvidia_smi_import_runs_under_nccl(run_cli: RunCli, tmp_path: Path,
                                           clean_env: dict[str, str], lib_dir: Path) -> None:
    proc = run_cli("topo", "import", str(DATA / "nvidia-smi-dgx-h100.txt"), "-o", "smi.yaml")
    assert proc.returncode == 0, proc.stderr
    dump = _structure(_nccl_dump(_generate(run_cli, "gen", "--spec", "smi.yaml"), clean_env,
                                 lib_dir, tmp_path / "dump.xml"))
    assert len(dump["gpus"]) == 8 and len(dump["nics"]) == 10
    assert [n for n in sorted(dump["nics"], key=lambda n: int(dump["nics"][n][3]))] == [
        f"mlx5_{i}" for i in range(10)]
    # Every GPU shares its PCIe switch with its NIC, as PIX said.
    nic_switch = {v[1]: name for name, v in dump["nics"].items()}
    gpu_nics = {g[0]: nic_switch.get(g[2]) for g in dump["gpus"].values()}
    assert gpu_nics == {str(i): f"mlx5_{i if i < 4 else i + 2}" for i in range(8)}
    assert all(sum(int(c) for _, c, _ in g[4]) == 18 for g in dump["gpus"].values())


# ---- nvidia-smi topo -m: the inferred tree gives back every relation ----

def _matrix(path: Path) -> tuple[list[str], dict[tuple[str, str], str], dict[str, str]]:
    text = re.sub(r"\x1b\[[0-9;]*m", "", path.read_text())
    lines = text.splitlines()
    header = next(line for line in lines if line.split()[:1] == ["GPU0"] and "X" not in line)
    columns = header.split()[:header.split().index("CPU")]
    cells = {}
    for line in lines:
        tokens = line.split()
        if tokens and tokens[0] in columns and len(tokens) > len(columns):
            for col, cell in zip(columns, tokens[1:]):
                cells[tokens[0], col] = cell
    legend = dict(re.findall(r"^\s*(NIC\d+): (\S+)$", text, re.M))
    return columns, cells, legend


Node = Union[CpuSocket, PciSwitch]


def _parents(host: Host) -> dict[PciAddress, Node]:
    parent: dict[PciAddress, Node] = {}
    nodes: list[Node] = [*host.sockets, *host.switches]
    for node in nodes:
        for child in node.children:
            parent[child] = node
    return parent


def _relation(host: Host, a: PciAddress, b: PciAddress) -> str:
    parent = _parents(host)

    def chain(bus: PciAddress) -> list[Node]:
        out = []
        node = parent[bus]
        while True:
            out.append(node)
            if isinstance(node, CpuSocket):
                return out
            node = parent[node.bus_id]

    ca, cb = chain(a), chain(b)
    if ca[-1] != cb[-1]:
        return "SYS"
    if isinstance(ca[0], PciSwitch) and ca[0] == cb[0]:
        return "PIX"
    common = [n for n in ca if isinstance(n, PciSwitch) and n in cb]
    return "PXB" if common else "PHB/NODE"


@pytest.mark.parametrize("fixture", ["nvidia-smi-dgx-h100.txt", "nvidia-smi-dgx-a100.txt"])
def test_nvidia_smi_relations_hold(fixture: str, tmp_path: Path) -> None:
    result = _import(DATA / fixture, tmp_path)
    host = result.host
    columns, cells, legend = _matrix(DATA / fixture)
    gpus = [c for c in columns if c.startswith("GPU")]
    nic_columns = [c for c in columns if c not in gpus]
    assert len(host.gpus) == len(gpus) and len(host.nics) == len(nic_columns)
    # NIC i of the host is the i-th NIC column, with its name.
    assert [n.name for n in host.nics] == [legend.get(c, c) for c in nic_columns]
    bus = {**{c: g.bus_id for c, g in zip(gpus, host.gpus)},
           **{c: n.bus_id for c, n in zip(nic_columns, host.nics)}}
    for (a, b), cell in cells.items():
        if a == b:
            continue
        nv = re.match(r"NV(\d+)$", cell)
        if nv:  # NVLinks hide the PCI relation; through NVSwitches here
            ga, gb = host.gpus[gpus.index(a)], host.gpus[gpus.index(b)]
            assert ga.nvlink_count == gb.nvlink_count == int(nv.group(1))
            assert {t.target for t in ga.nvlinks} == {t.target for t in gb.nvlinks}
            continue
        want = "PHB/NODE" if cell in ("PHB", "NODE") else cell
        assert _relation(host, bus[a], bus[b]) == want, (a, b)
    assert any("bus numbers are invented" in n for n in result.notes)


def test_nvidia_smi_cpu_and_numa(tmp_path: Path) -> None:
    host = _import(DATA / "nvidia-smi-dgx-h100.txt", tmp_path).host
    assert [s.numa_id for s in host.sockets] == [0, 1]
    assert [g.numa_node for g in host.gpus] == [0] * 4 + [1] * 4
    # 0-55,112-167 and 56-111,168-223: 2 x 56 cores x 2 threads, as Linux numbers them.
    assert host.sockets[0].affinity == (
        "00000000,000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff")
    a100 = _import(DATA / "nvidia-smi-dgx-a100.txt", tmp_path)
    # NPS4: the GPUs' NUMA nodes as given; the storage NICs (SYS to every GPU) on a
    # node of their own, with the CPUs no GPU has.
    assert [s.numa_id for s in a100.host.sockets] == [3, 1, 7, 5, 0]
    assert [g.numa_node for g in a100.host.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    bits = int(a100.host.sockets[0].affinity.replace(",", ""), 16)
    assert [c for c in range(256) if bits >> c & 1] == [*range(48, 64), *range(176, 192)]
    assert any("mlx5_4, mlx5_5" in n and "the CPUs no GPU has" in n for n in a100.notes)
    assert a100.host.sockets[0].vendor == "AuthenticAMD"  # dgx-a100's CPU, said in a note


def test_nvidia_smi_needs_the_model_when_nvlink_does_not_tell(run_cli: RunCli,
                                                              tmp_path: Path) -> None:
    # A PCIe board: 4 GPUs without NVLink, 2 per switch, one NIC on the first.
    text = ("\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tPIX\tSYS\tSYS\tPIX\t0-31\t0\n"
            "GPU1\tPIX\t X \tSYS\tSYS\tPIX\t0-31\t0\n"
            "GPU2\tSYS\tSYS\t X \tPIX\tSYS\t32-63\t1\n"
            "GPU3\tSYS\tSYS\tPIX\t X \tSYS\t32-63\t1\n"
            "NIC0\tPIX\tPIX\tSYS\tSYS\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n")
    (tmp_path / "pcie.txt").write_text(text)
    _one_error_line(run_cli("topo", "import", "pcie.txt", "-o", "pcie.yaml"),
                    r"pcie\.txt: `nvidia-smi topo -m` does not name the GPU model .* give "
                    r"--gpu-model \(h100, a100, l40s, v100, .*, b200, gb200\)")
    assert not (tmp_path / "pcie.yaml").exists()
    proc = run_cli("topo", "import", "pcie.txt", "-o", "pcie.yaml", "--gpu-model", "l40s")
    assert proc.returncode == 0, proc.stderr
    assert "4 GPUs (no NVLink), 1 NIC (200 Gb/s), 2 PCI switches, 2 sockets" in proc.stdout
    assert run_cli("topo", "validate", "pcie.yaml").returncode == 0


# ---- hand-written NCCL topology files ----

def test_azure_ndv5_style_file(run_cli: RunCli, tmp_path: Path) -> None:
    src = DATA / "azure-ndv5-style.xml"
    # No PCI ids and no <gpu>: the model must be given.
    _one_error_line(run_cli("topo", "import", str(src), "-o", "nd.yaml"),
                    r'azure-ndv5-style\.xml:6: <pci busid="0001:00:00\.0">: cannot tell the GPU '
                    r"model \(no device id, no <gpu sm>\).*give --gpu-model")
    assert not (tmp_path / "nd.yaml").exists()
    proc = run_cli("topo", "import", str(src), "-o", "nd.yaml", "--gpu-model", "h100", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["gpus"], doc["nvlinks_per_gpu"], doc["nics"], doc["nic_speeds_mbps"],
            doc["pci_switches"], doc["sockets"]) == (8, [18] * 8, 8, [400000] * 8, 8, 2)
    # One PCI domain per device on the VM: numbered afresh, in the VM's order.
    renumbered = {k: int(v, 16) for k, v in doc["renumbered"].items()}
    assert len(renumbered) == 24
    result = _import(src, tmp_path, "h100")
    host = result.host
    for i, g in enumerate(host.gpus):
        assert g.bus_id.bus == renumbered[f"{i + 1:04x}:00:00.0"]
        switch = host.device(_parents(host)[g.bus_id].bus_id)  # type: ignore[union-attr]
        (nic,) = [n for n in host.nics if n.switch == switch.bus_id]
        assert nic.bus_id.bus == renumbered[f"{0x101 + i:04x}:00:00.0"] and nic.name == f"mlx5_{i}"
    assert [g.numa_node for g in host.gpus] == [0] * 4 + [1] * 4
    text = (tmp_path / "nd.yaml").read_text()
    assert "# * h100 GPUs without <gpu> in the file (NCCL asks NVML for their NVLinks):" in text
    assert "ffff:ff:01.0 -> 0x10" in text
    assert run_cli("topo", "validate", "nd.yaml").returncode == 0


def test_azure_ndv4_style_file(tmp_path: Path) -> None:
    host = _import(DATA / "azure-ndv4-style.xml", tmp_path, "a100").host
    assert [s.numa_id for s in host.sockets] == [0, 1, 2, 3]
    assert [len(s.children) for s in host.sockets] == [1] * 4  # one switch each
    assert all(len(s.children) == 4 for s in host.switches)  # 2 GPUs + 2 NICs
    assert {s.link.speed for s in host.switches} == {"16.0 GT/s PCIe"}  # from "16 GT/s"
    assert host.sockets[2].affinity == "000000ff,ffff0000,00000000"
    assert {(s.vendor, s.family_id, s.model_id) for s in host.sockets} == {("AuthenticAMD", 23, 49)}


def test_hand_written_bare_metal_file(tmp_path: Path) -> None:
    result = _import(DATA / "hand-written-h200-4gpu.xml", tmp_path)
    host = result.host
    assert {g.model for g in host.gpus} == {"h200"}  # device 0x2335: a model of its own
    assert not any("are presented as" in n for n in result.notes)
    assert any("2 <net> (ports)" in n for n in result.notes)
    assert any("class 0x010802" in n and "left out" in n for n in result.notes)
    # Direct GPU-GPU NVLinks, 6 to each peer.
    for g in host.gpus:
        assert sorted(link.target for link in g.nvlinks) == sorted(
            p.bus_id for p in host.gpus if p != g)
        assert {link.count for link in g.nvlinks} == {6} and not host.nvswitches
    assert [(n.name, n.transport, n.speed_mbps, n.max_conn, n.gdr) for n in host.nics] == [
        ("mlx5_0", "ethernet", 200000, 131072, True), ("mlx5_1", "ethernet", 200000, 131072, True)]
    # GPUs and NICs shared buses: every device has its own bus number now.
    assert len(result.renumbered) == 8


def test_a_real_nccl_dump_without_topology_file(tmp_path: Path) -> None:
    # NCCL 2.32 detecting a machine by itself: no NUMA id, no affinity, class
    # "0x03", an NVSwitch it cannot see, a socket NIC.
    result = _import(REPORT_DUMP, tmp_path)
    host = result.host
    assert len(host.gpus) == 8 and not host.nics and len(host.nvswitches) == 1
    assert {g.nvlink_count for g in host.gpus} == {18}
    assert [s.numa_id for s in host.sockets] == [0]
    notes = " | ".join(result.notes)
    for fragment in ("NIC lo has no PCI device", 'numaid="-1"', "CPU affinity unknown"):
        assert fragment in notes


def test_gpu_model_by_device_id_variant_or_capability(catalog: GpuCatalog) -> None:
    assert model_by_device(catalog, 0x2335) == (catalog.get("h200"), None)
    assert model_by_device(catalog, 0x2324) == (catalog.get("h100"), "H800")  # a variant
    assert model_by_device(catalog, 0x1234) is None
    # By compute capability: the first model of it in the catalog
    firsts = [model_by_sm(catalog, sm) for sm in (90, 80, 89, 100)]
    assert [m.key if m else None for m in firsts] == ["h100", "a100", "l40s", "b200"]
    assert model_by_sm(catalog, 75) is None


# ---- what cannot be imported ----

NOT_XML = '<system version="1">\n  <cpu numaid="0">\n    <pci busid="0000:18:00.0">\n</system>\n'
GPU_XML = ('<system version="1">\n  <cpu numaid="0" affinity="ff" arch="x86_64" '
           'vendor="GenuineIntel" familyid="6" modelid="143">\n'
           '    <pci busid="0000:18:00.0" class="0x030200" vendor="0x10de" device="{device}" '
           'link_speed="32.0 GT/s PCIe" link_width="16"/>\n  </cpu>\n</system>\n')
SMI_HEAD = "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\n"


@pytest.mark.parametrize("name,text,args,fragment", [
    ("bad.xml", NOT_XML, [], r"bad\.xml:4: not well-formed XML: .*mismatch"),
    ("page.xml", "<html><body>hi</body></html>\n", [],
     r"page\.xml:1: <html> is not an NCCL topology: its top element is <system>"),
    ("graph.xml", '<graphs version="1"/>\n', [], r"graph\.xml:1: this is NCCL's graph dump"),
    ("empty.xml", '<system version="1"/>\n', [], r"empty\.xml:1: <system> has no <cpu>"),
    ("gpu.xml", GPU_XML.format(device="0x1234"), [],
     r'gpu\.xml:3: <pci busid="0000:18:00\.0"> device="0x1234": cannot tell the GPU model '
     r"\(vendor 0x10de, device 0x1234, no <gpu sm>\)"),
    ("gpu.xml", GPU_XML.format(device="0x2330").replace('"0000:18:00.0"', '"18:00.0"'), [],
     r'gpu\.xml:3: <pci> busid="18:00\.0": expected a PCI bus id'),
    ("gpu.xml", GPU_XML.format(device="0x2330"), ["--gpu-model", "h900"],
     r"unknown GPU model 'h900' \(known: h100, a100, l40s, .*\)"),
    ("notes.txt", "GPU topology of my machine\n", [],
     r"notes\.txt: neither an NCCL topology XML .* nor the output of `nvidia-smi topo -m`"),
    ("smi.txt", SMI_HEAD + "GPU0\t X \tNV18\tPIX\t0-7\t0\nGPU1\tNV18\t X \tPIQ\t0-7\t0\n", [],
     r"smi\.txt:3: row GPU1, column NIC0: 'PIQ' is not what nvidia-smi prints there"),
    ("smi.txt", SMI_HEAD + "GPU0\t X \tNV18\n", [],
     r"smi\.txt:2: row GPU0 has 2 entries for 3 columns"),
    ("smi.txt", SMI_HEAD + "GPU0\t X \tPIX\tPIX\t0-7\t0\nGPU1\tPIX\t X \tSYS\t0-7\t0\n"
     "NIC0\tPIX\tSYS\t X \n", ["--gpu-model", "l40s"],
     r"smi\.txt:3: GPU1/NIC0 is SYS, which no PCI tree agreeing with the other relations gives "
     r"\(inferred: PIX\)"),
    ("smi.txt", SMI_HEAD + "GPU0\t X \tPIX\tPXB\t0-7\t0\nGPU1\tPIX\t X \tPIX\t0-7\t0\n"
     "NIC0\tPXB\tPIX\t X \n", ["--gpu-model", "l40s"],
     r"smi\.txt:2: GPU0/NIC0 is PXB, which no PCI tree agreeing with the other relations gives"),
    ("smi.txt", SMI_HEAD + "GPU0\t X \tPIX\tPIX\t0-7\t0\nGPU1\tPIX\t X \tPIX\t0-7\t0\n"
     "NIC0\tPIX\tPXB\t X \n", ["--gpu-model", "l40s"],
     r"smi\.txt:3: GPU1/NIC0 is PIX but NIC0/GPU1 \(line 4\) is PXB"),
    ("smi.txt", SMI_HEAD + "GPU0\t X \tPIX\tPIX\t0-7\t0\n", [], r"smi\.txt: no row for GPU1"),
])
def test_import_rejects(run_cli: RunCli, tmp_path: Path, name: str, text: str, args: list[str],
                        fragment: str) -> None:
    (tmp_path / name).write_text(text)
    _one_error_line(run_cli("topo", "import", name, "-o", "out.yaml", *args), fragment)
    assert not (tmp_path / "out.yaml").exists()


def test_import_rejects_bad_files_and_outputs(run_cli: RunCli, tmp_path: Path) -> None:
    _one_error_line(run_cli("topo", "import", "missing.xml", "-o", "out.yaml"),
                    r"missing\.xml: no such file")
    _one_error_line(run_cli("topo", "import", str(tmp_path), "-o", "out.yaml"),
                    r"is a directory without topo-dump\.xml")
    (tmp_path / "binary.xml").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    _one_error_line(run_cli("topo", "import", "binary.xml", "-o", "out.yaml"),
                    r"binary\.xml: not UTF-8 text")
    src = str(DATA / "nvidia-smi-dgx-h100.txt")
    _one_error_line(run_cli("topo", "import", src, "-o", "out.txt"),
                    r"-o out\.txt: a spec file ends in \.yaml")
    _one_error_line(run_cli("topo", "import", src), r"required: -o/--output")
    assert not list(tmp_path.glob("out*"))


# ---- what NCCL writes or reads its own way ----

def _dump(device: str, sm: int, gpu_inside: str, gpus: int = 2, nics: str = "") -> str:
    """A topology in the shape of NCCL's dump (NCCL_TOPO_DUMP_FILE) of a VM:
    GPUs on root ports, `gpu_inside` the children of each <gpu>, then `nics`."""
    pcis = "".join(
        f'    <pci busid="0000:{0x10 + i:02x}:00.0" class="0x030200" vendor="0x10de" '
        f'device="{device}" subsystem_vendor="0x10de" subsystem_device="0x16c1" '
        f'link_speed="16.0 GT/s PCIe" link_width="16">\n'
        f'      <gpu dev="{i}" sm="{sm}" rank="{i}" gdr="1">\n{gpu_inside}      </gpu>\n'
        "    </pci>\n" for i in range(gpus))
    return ('<system version="1">\n  <cpu host_hash="0x5c4c3b3c8e3b1e6d" numaid="0" '
            'affinity="ffffffff" arch="x86_64" vendor="GenuineIntel" familyid="6" '
            f'modelid="106">\n{pcis}{nics}  </cpu>\n</system>\n')


def _nic(bus: int, net: str) -> str:
    return (f'    <pci busid="0000:{bus:02x}:00.0" class="0x020700" vendor="0x15b3" device="0x1021" '
            'subsystem_vendor="0x15b3" subsystem_device="0x0023" link_speed="32.0 GT/s PCIe" '
            f'link_width="16">\n      <nic>\n        {net}\n      </nic>\n    </pci>\n')


VM_NVLINK = '        <nvlink target="fffffff:ff:ff.0" count="12" tclass="0x068000"/>\n'


def test_vm_nvlink_target_is_an_nvswitch(tmp_path: Path) -> None:
    # NCCL in a VM that does not show the NVSwitch: a target that is no device.
    (tmp_path / "vm.xml").write_text(_dump("0x20b2", 80, VM_NVLINK))
    result = _import(tmp_path / "vm.xml", tmp_path)
    host = result.host
    assert len(host.nvswitches) == 1
    for g in host.gpus:
        assert [(t.target, t.count) for t in g.nvlinks] == [(host.nvswitches[0].bus_id, 12)]
    assert any('"fffffff:ff:ff.0" is no device' in n and "an NVSwitch" in n
               for n in result.notes)


def test_gpu_without_nvlink_asks_nvml(tmp_path: Path) -> None:
    # <gpu> with no <nvlink>: NCCL asks NVML, and an H100 board has its NVSwitches.
    (tmp_path / "h100.xml").write_text(_dump("0x2330", 90, ""))
    result = _import(tmp_path / "h100.xml", tmp_path)
    assert {g.nvlink_count for g in result.host.gpus} == {18}
    assert len(result.host.nvswitches) == 4  # spread as on dgx-h100
    assert any("<gpu> but no <nvlink> (NCCL asks NVML" in n and "as on dgx-h100" in n
               for n in result.notes)
    # A model with NVLinks but no known layout (H100 PCIe: bridges, if any) keeps none.
    (tmp_path / "pcie.xml").write_text(_dump("0x2331", 90, ""))
    pcie = _import(tmp_path / "pcie.xml", tmp_path)
    assert {g.nvlink_count for g in pcie.host.gpus} == {0} and not pcie.host.nvswitches
    assert any("h100-pcie GPUs with <gpu> but no <nvlink>" in n and "none are assumed" in n
               for n in pcie.notes)
    # A model without a preset of its own takes its board's (gpu_models.json nvlink_board):
    # an A100 40GB sits on a DGX A100 board.
    (tmp_path / "a100.xml").write_text(_dump("0x20b0", 80, ""))
    a100 = _import(tmp_path / "a100.xml", tmp_path)
    assert {g.model for g in a100.host.gpus} == {"a100-40gb"}
    assert {g.nvlink_count for g in a100.host.gpus} == {12} and len(a100.host.nvswitches) == 6
    assert any("a100-40gb GPUs with <gpu> but no <nvlink>" in n and "as on dgx-a100" in n for n in a100.notes)


SYS_IN_ONE_NUMA = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tNIC2\tNIC3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV18\tNV18\tNV18\tPIX\tNODE\tSYS\tSYS\t0-63\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tNV18\tNV18\tNODE\tPIX\tSYS\tSYS\t0-63\t0\t\tN/A\n"
    "GPU2\tNV18\tNV18\t X \tNV18\tSYS\tSYS\tPIX\tNODE\t0-63\t0\t\tN/A\n"
    "GPU3\tNV18\tNV18\tNV18\t X \tSYS\tSYS\tNODE\tPIX\t0-63\t0\t\tN/A\n"
    "NIC0\tPIX\tNODE\tSYS\tSYS\t X \tNODE\tSYS\tSYS\n"
    "NIC1\tNODE\tPIX\tSYS\tSYS\tNODE\t X \tSYS\tSYS\n"
    "NIC2\tSYS\tSYS\tPIX\tNODE\tSYS\tSYS\t X \tNODE\n"
    "NIC3\tSYS\tSYS\tNODE\tPIX\tSYS\tSYS\tNODE\t X \n\n"
    "Legend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP "
    "interconnect between NUMA nodes (e.g., QPI/UPI)\n\nNIC Legend:\n\n"
    + "".join(f"  NIC{i}: mlx5_{i}\n" for i in range(4)))


def test_nvidia_smi_sys_within_one_numa_node(tmp_path: Path) -> None:
    # Every GPU says NUMA node 0, yet GPU2/GPU3 and their NICs are SYS to the rest.
    src = tmp_path / "smi.txt"
    src.write_text(SYS_IN_ONE_NUMA)
    result = _import(src, tmp_path)
    host = result.host
    assert [s.numa_id for s in host.sockets] == [0, 1]
    assert [g.numa_node for g in host.gpus] == [0, 0, 1, 1]
    columns, cells, _ = _matrix(src)
    bus = {c: d.bus_id for c, d in zip(columns, [*host.gpus, *host.nics])}
    for (a, b), cell in cells.items():
        if a != b and not cell.startswith("NV"):
            assert _relation(host, bus[a], bus[b]) == cell.replace("NODE", "PHB/NODE"), (a, b)
    assert any("GPU2, GPU3, NIC2, NIC3 report NUMA node 0 but are SYS" in n
               and "placed on NUMA node 1" in n for n in result.notes)


def test_nics_keep_the_files_numbering(run_cli: RunCli, tmp_path: Path) -> None:
    # mlx5_0 sits on a later bus than mlx5_1: NCCL's NET/0 is mlx5_0, as in the file.
    net = '<net name="mlx5_{n}" dev="{n}" speed="400000" port="1" latency="0" guid="0x{n}" maxconn="131072" gdr="1"/>'
    (tmp_path / "dev.xml").write_text(_dump("0x2330", 90, "", nics=_nic(0x40, net.format(n=1)) + _nic(0x50, net.format(n=0))))
    result = _import(tmp_path / "dev.xml", tmp_path)
    assert [(n.index, n.name, n.bus_id.bus) for n in result.host.nics] == [(0, "mlx5_0", 0x50), (1, "mlx5_1", 0x40)]
    assert "dev: 0" in result.text and not any("numbered in bus order" in n for n in result.notes)
    # Without dev (provider files), the number ending the name tells.
    (tmp_path / "named.xml").write_text(_dump("0x2330", 90, "", nics=_nic(0x40, '<net name="mlx5_1"/>') +
                                              _nic(0x50, '<net name="mlx5_0"/>')))
    named = _import(tmp_path / "named.xml", tmp_path)
    assert [(n.name, n.bus_id.bus) for n in named.host.nics] == [("mlx5_0", 0x50), ("mlx5_1", 0x40)]
    # topo generate --topo FILE: hosts of that machine (each in its own PCI domain),
    # whose NCCL topology numbers the NICs so; the spec kept beside them.
    proc = run_cli("topo", "generate", "--topo", "dev.xml", "--hosts", "2", "-o", "gen", "--json")
    assert proc.returncode == 0, proc.stderr
    for h, host in enumerate(json.loads(proc.stdout)["hosts"]):
        xml = etree.parse(host["topo_xml"]).getroot()
        assert [(n.get("name"), n.get("dev"), n.getparent().getparent().get("busid")) for n in xml.iter("net")] == [
            ("mlx5_1", "1", f"{h:04x}:40:00.0"), ("mlx5_0", "0", f"{h:04x}:50:00.0")]
    kept = (tmp_path / "gen" / "topo-spec.yaml").read_text()
    assert 'name: "topo-spec"' in kept and "{bus: 0x50, dev: 0}" in kept
    (tmp_path / "imported.yaml").write_text(result.text)
    # A hand-written spec gives every NIC a dev, or none.
    (tmp_path / "imported.yaml").write_text(result.text.replace("{bus: 0x50, dev: 0}", "0x50"))
    _one_error_line(run_cli("topo", "validate", "imported.yaml"), r"NIC dev numbers -, 1: give every NIC one")


def test_gpu_links_and_collnet_as_the_file_says(tmp_path: Path) -> None:
    a100 = _dump("0x20b2", 80, "")  # GPUs on 16 GT/s x16 links, as the model's
    net = '<net name="mlx5_0" dev="0" speed="200000" port="1" coll="1"/>'
    cases = {  # the file's link_speed -> the GPUs' link, and the note it takes
        '"8.0 GT/s PCIe"': ("8.0 GT/s PCIe", None),  # as on AWS p4d: kept as written
        '""': ("8.0 GT/s PCIe", "PCI link speed '' missing or unknown: 8.0 GT/s PCIe, as NCCL reads it"),
        None: ("16.0 GT/s PCIe", "a100 GPUs without a PCI link speed (NCCL reads the machine's): 16.0 GT/s PCIe"),
    }
    for written, (speed, note) in cases.items():
        text = a100.replace('link_speed="16.0 GT/s PCIe" ', "" if written is None else f"link_speed={written} ")
        (tmp_path / "a100.xml").write_text(text.replace("  </cpu>", _nic(0x40, net) + "  </cpu>"))
        result = _import(tmp_path / "a100.xml", tmp_path)
        assert {(g.link.speed, g.link.width) for g in result.host.gpus} == {(speed, 16)}, written
        assert note is None or any(n.startswith(note) for n in result.notes), result.notes
        # What NVML and the modelled PCIe time read: the platform file's link.
        conf = platform_config(result.host)
        assert {(g.pcie_gen, g.pcie_width) for g in conf.gpus} == {(3 if speed.startswith("8") else 4, 16)}
        # coll="1": the network reduces in its switches, for the whole host.
        assert result.preset.collnet and result.host.collnet
        assert any('coll="1"' in n and "collnet: true" in n for n in result.notes)


@pytest.mark.e2e
def test_a_machine_without_a_pci_nic_runs(run_cli: RunCli, tmp_path: Path) -> None:
    # As Azure's NC A100 v4: A100 PCIe GPUs, one Ethernet port NCCL finds by its socket, none on PCI.
    eth = ('    <nic>\n      <net name="eth0" dev="0" speed="40000" port="0" latency="0" guid="0x0" '
           'maxconn="65536" gdr="0"/>\n    </nic>\n')
    (tmp_path / "nc.xml").write_text(_dump("0x20b5", 80, "", nics=eth))
    proc = run_cli("launch", "--topo", "nc.xml", "--hosts", "2", "--run-dir", "run", timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (report["nranks"], report["nnodes"]) == (4, 2)
    assert report["transports"]["inter_host"] == ["NET/Socket"], report["transports"]
    assert all(c["ok"] for c in report["checks"]), report["checks"]
    spec = re.sub(r"\n#\s+", " ", (tmp_path / "run" / "topo-spec.yaml").read_text())  # comments unwrapped
    assert "NIC eth0 has no PCI device" in spec and "NCCL runs its own socket transport" in spec


def test_what_the_spec_does_not_keep_is_noted(tmp_path: Path) -> None:
    net = ('<net name="mlx5_0" dev="0" speed="400000" port="1" latency="0" guid="0x1" maxconn="131072" gdr="1" '
           'net="1" rail="3"/>')
    text = _dump("0x2330", 90, "").replace('gdr="1"', 'gdr="0"', 1) + ""
    (tmp_path / "f.xml").write_text(text.replace("  </cpu>", _nic(0x40, net) + "  </cpu>"))
    notes = _import(tmp_path / "f.xml", tmp_path).notes
    assert any(n.startswith("<gpu> gdr: not kept (NCCL asks the simulated machine") for n in notes), notes
    assert "<net> rail: not kept (not simulated)" in notes
    # What NCCL's dumps carry and the simulation has as they say is no change.
    assert not any(n.startswith(("<net> guid", "<net> net", "<gpu> rank", "<cpu> host_hash")) for n in notes)
    assert sum(n.startswith("<gpu> gdr") for n in notes) == 1  # the GPU of gdr="1" is as simulated
