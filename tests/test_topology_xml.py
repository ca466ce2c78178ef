"""The NCCL topology XML of a simulated host: what the writer produces, what the
validator rejects, and, the real check, what unmodified NCCL makes of it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from lxml import etree

from ncclsim.cluster import Host, build_cluster
from ncclsim.topology.host_artifacts import HostArtifacts, write_host_artifacts
from ncclsim.paths import cudart_lib_dir, nccl_lib_dir
from ncclsim.topology.validate import TopologyXmlError, validate_topology
from ncclsim.topology.xml_writer import render_topology

NET_PLUGIN = "libnccl-net-ncclsim.so"


@pytest.fixture
def host(no_sys_pci: Path) -> Host:
    return build_cluster("dgx-h100", hosts=2, sys_pci_devices=no_sys_pci).hosts[1]


@pytest.fixture
def xml(host: Host) -> str:
    return render_topology(host, "dgx-h100")


# ---- what the writer produces ----

def _ids(pci: Any) -> tuple[str, ...]:
    return tuple(pci.get(k) for k in ("class", "vendor", "device"))


def test_rendered_topology_describes_the_host(host: Host, xml: str) -> None:
    root = etree.fromstring(xml.encode())
    assert (root.tag, root.get("version")) == ("system", "1")
    cpus = root.findall("cpu")
    assert [c.get("numaid") for c in cpus] == ["0", "1"]
    cpu_ids = {tuple(c.get(k) for k in ("arch", "vendor", "familyid", "modelid")) for c in cpus}
    assert cpu_ids == {("x86_64", "GenuineIntel", "6", "143")}
    switches = [p for p in root.iter("pci") if p.get("class") == "0x060400"]
    assert [s.getparent().tag for s in switches] == ["cpu"] * 8
    gpus = root.findall(".//gpu")
    assert [g.get("dev") for g in gpus] == [str(i) for i in range(8)]
    for g, model in zip(gpus, host.gpus):
        pci = g.getparent()
        assert pci.get("busid") == str(model.bus_id)
        assert _ids(pci) == ("0x030200", "0x10de", "0x2330")
        assert g.get("sm") == "90"
        # Set by NCCL at run time, not in an input file.
        assert not {"rank", "keep", "gdr"} & set(g.attrib)
        links = g.findall("nvlink")
        assert sum(int(n.get("count")) for n in links) == 18
        assert {n.get("tclass") for n in links} == {"0x068000"}
    nets = root.findall(".//nic/net")
    assert [n.get("name") for n in nets] == [f"mlx5_{i}" for i in range(8)]
    for n, gpu, nic in zip(nets, gpus, host.nics):
        pci = n.getparent().getparent()
        assert _ids(pci) == ("0x020700", "0x15b3", "0x1021")
        # Behind the same PCI switch as its GPU.
        assert pci.getparent() is gpu.getparent().getparent()
        assert (n.get("speed"), n.get("port"), n.get("guid")) == ("400000", "1", f"{nic.guid:#x}")


def test_bus_ids_are_lowercase_in_the_hosts_domain(host: Host, xml: str) -> None:
    ids = re.findall(r'(?:busid|target)="([^"]+)"', xml)
    assert len(ids) == 8 * 3 + 8 * 4
    assert all(re.fullmatch(r"0001:[0-9a-f]{2}:00\.0", i) for i in ids), ids
    busids = re.findall(r'busid="([^"]+)"', xml)
    assert len(set(busids)) == len(busids)


def test_written_for_nccls_own_reader(xml: str) -> None:
    assert not xml.startswith("<?xml")
    assert "\t" not in xml and " />" not in xml and "&" not in xml
    assert xml.startswith("<!-- ncclsim: preset dgx-h100, host 1 (ncclsim-h1")
    validate_topology(xml, domain=1)


def test_fewer_devices(no_sys_pci: Path) -> None:
    (host,) = build_cluster("dgx-h100", gpus=1, nics=0, sys_pci_devices=no_sys_pci).hosts
    xml = render_topology(host)
    root = etree.fromstring(xml.encode())
    assert len(root.findall(".//gpu")) == 1 and root.find(".//nic") is None
    assert len(root.findall("cpu/pci")) == 1
    assert root.findall("cpu")[1].getchildren() == []  # the socket remains, empty


# ---- what the validator rejects ----

Edit = Callable[[str], str]


def _replace(old: str, new: str, count: int = 1) -> Edit:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, count)
    return edit


@pytest.mark.parametrize("edit,message", [
    (_replace('busid="0001:18:00.0"', 'busid="0001:18:00.0X"'),
     r'<pci> busid="0001:18:00.0X": must be a lowercase'),
    (_replace('busid="0001:18:00.0"', 'busid="0001:1A:00.0"'), r"must be a lowercase PCI bus id"),
    (_replace('busid="0001:18:00.0"', 'busid="0000:18:00.0"'),
     r"not in this host's PCI domain 0001"),
    (_replace('target="0001:05:00.0"', 'target="0002:05:00.0"'),
     r'<nvlink> target="0002:05:00.0": not in'),
    (_replace('busid="0001:19:00.0"', 'busid="0001:18:00.0"'),
     r"already used on line 5; must be unique"),
    (_replace('guid="0x6e63736d00010001"', 'guid="0x6e63736d00010000"'),
     r'<net> guid=.*must be unique'),
    (_replace('name="mlx5_1"', 'name="mlx5_0"'), r'<net> name="mlx5_0": already used'),
    (_replace('<gpu dev="1"', '<gpu dev="0"'), r'<gpu> dev="0": already used'),
    (_replace('sm="90">', 'sm="90" keep="1">'), r'<gpu> keep="1": NCCL sets this attribute itself'),
    (_replace('sm="90">', 'sm="90" color="red">'), r'<gpu> color="red": unknown attribute'),
    (_replace(' link_width="16"', ''), r"<pci>: missing link_width \(without it NCCL would look"),
    (_replace(' tclass="0x068000"', ''), r"<nvlink>: missing tclass"),
    (_replace(' affinity="', ' affinity="zz,'), r"<cpu> affinity=.*must be a Linux cpumask"),
    (_replace('link_speed="32.0 GT/s PCIe"', 'link_speed="32 GT/s Gen5"'),
     r"not a speed NCCL knows"),
    (_replace('count="5"', 'count="15"'), r"<gpu>: 28 NVLinks; NCCL counts at most 18"),
    (_replace('count="5" tclass="0x068000"', 'count="5" tclass="0x030200"'),
     r"<nvlink> target=.*no GPU of this file has that bus id"),
    (_replace('<nic>', '<gpu dev="9" sm="90"/><nic>'), r"holds a <gpu>, so its class must be"),
    (_replace('<nic>', '<nvlink target="0001:05:00.0" count="1" tclass="0x068000"/><nic>'),
     r"<nvlink>: cannot be inside <pci>"),
    (_replace('<nic>', '<switch/><nic>'), r"<switch>: unknown element"),
    (_replace('name="mlx5_0"', 'name="' + "m" * 254 + '"'), r"value longer than 253"),
    (_replace('name="mlx5_0"', 'name="a&amp;b"'), r"NCCL reads values verbatim"),
    (_replace('sm="90">', 'sm="90"' + "".join(f' a{i}="1"' for i in range(15)) + ">"),
     r"<gpu>: 17 attributes; NCCL keeps at most 16"),
    (lambda t: '<?xml version="1.0"?>\n' + t, r":1: NCCL cannot read the tag '<\?xml"),
    (_replace('  <cpu', '\t<cpu'), r":3: NCCL expects '<' here, got '\\t'"),
    (_replace('tclass="0x068000"/>', 'tclass="0x068000" />'),
     r"no space around '=' or before '/>'"),
    (_replace('<gpu dev="0" sm="90">', '<gpu dev = "0" sm="90">'), r":6: NCCL cannot read the tag"),
    (_replace("</gpu>", "</gpux>"), r"not well-formed XML"),
    (_replace('<system version="1"', '<system version="2"'),
     r'<system> version="2": must be one of 1'),
])
def test_validator_rejects(xml: str, edit: Edit, message: str) -> None:
    with pytest.raises(TopologyXmlError, match=message) as err:
        validate_topology(edit(xml), domain=1, source="h1.xml")
    assert re.match(r"h1\.xml:\d+: ", str(err.value)), str(err.value)


def test_validator_limits_children(xml: str) -> None:
    nets = "".join(f'<net name="n{i}"/>' for i in range(32))  # + mlx5_0
    with pytest.raises(TopologyXmlError, match="33 children; NCCL's reader holds at most 32"):
        validate_topology(xml.replace("<nic>", "<nic>" + nets, 1))


def test_validator_accepts_what_nccl_accepts(xml: str) -> None:
    # Comments, an invisible NVSwitch and optional net attributes are fine.
    text = xml.replace('target="0001:05:00.0"', 'target="fffffff:ffff:ff"').replace(
        'guid="0x6e63736d00010000"', 'guid="0x6e63736d00010000" maxconn="131072" gdr="1"')
    validate_topology(text.replace("<system", "<!-- a note -->\n<system"), domain=1)


def test_validator_takes_what_nccl_replaces(xml: str) -> None:
    # NCCL's own dumps carry host_hash, rank and mlopart; NCCL replaces them on reading.
    dump = xml.replace('modelid="143">', 'modelid="143" host_hash="0x1">', 1).replace(
        'sm="90">', 'sm="90" rank="3" mlopart="-1">', 1)
    assert dump.count("host_hash") == 1 and dump.count('rank="3"') == 1
    notes = validate_topology(dump, domain=1)
    assert [n.split(":")[0] for n in notes] == ["<cpu> host_hash", "<gpu> rank", "<gpu> mlopart"]
    assert all("NCCL replaces it" in n for n in notes)


def test_validator_takes_a_vm_nvlink_target_for_an_nvswitch(xml: str) -> None:
    # NCCL in a VM that does not show the NVSwitch writes a target that is no bus id;
    # behind tclass 0x068000 NCCL never reads it.
    vm = xml.replace('target="0001:05:00.0"', 'target="fffffff:ff:ff.0"')
    assert vm != xml
    assert validate_topology(xml, domain=1) == []
    (note,) = validate_topology(vm, domain=1)
    assert '"fffffff:ff:ff.0" is no bus id' in note and "NVSwitch" in note
    # Behind a GPU's tclass NCCL looks the target up: it must be a bus id.
    gpu = vm.replace('target="fffffff:ff:ff.0" count="5" tclass="0x068000"',
                     'target="fffffff:ff:ff.0" count="5" tclass="0x030200"', 1)
    assert gpu != vm
    with pytest.raises(TopologyXmlError, match=r'target="fffffff:ff:ff\.0": must be a lowercase'):
        validate_topology(gpu, domain=1)


# ---- NCCL reads it ----

def _sim_env(clean_env: dict[str, str], lib_dir: Path, art: HostArtifacts,
             tmp_path: Path) -> dict[str, str]:
    return {**clean_env, **art.environment(),
            "LD_LIBRARY_PATH": ":".join(map(str, [lib_dir, nccl_lib_dir(), cudart_lib_dir()])),
            "NCCL_TOPO_DUMP_FILE": str(tmp_path / "dump.xml"),
            "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH",
            "NCCL_DEBUG_FILE": str(tmp_path / "nccl.log")}


def _run_probe(env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "ncclsim.probe", "--gpus-per-process", "8"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


def _same_attributes(ours: Any, dumped: Any) -> None:
    """NCCL kept every value of the file (and added only its own)."""
    assert dumped is not None
    for k, v in ours.attrib.items():
        assert dumped.get(k) == v, (ours.tag, k, v, dumped.get(k))


def _sys_lookups(log: str) -> set[str]:
    pattern = r"Could not find real path of /sys/class/pci_bus/[^/]+/\.\./\.\./(\S+)"
    return set(re.findall(pattern, log))


@pytest.fixture
def artifacts(tmp_path: Path) -> list[HostArtifacts]:
    """2 hosts x 8 GPUs; bus ids off the real /sys, as ncclsim chooses them here."""
    cluster = build_cluster("dgx-h100", hosts=2)
    return write_host_artifacts(cluster, tmp_path / "hosts")


@pytest.mark.e2e
@pytest.mark.parametrize("index", [0, 1])
def test_nccl_loads_the_topology(index: int, artifacts: list[HostArtifacts],
                                 clean_env: dict[str, str], lib_dir: Path, tmp_path: Path) -> None:
    art = artifacts[index]
    host = art.host
    _run_probe(_sim_env(clean_env, lib_dir, art, tmp_path))
    log = (tmp_path / "nccl.log").read_text()
    assert f"Loading topology file {art.topo_xml}" in log
    ours = etree.fromstring(art.topo_xml.read_text().encode())
    dump = etree.parse(str(tmp_path / "dump.xml")).getroot()
    # NCCL's fused view of the host: our 8 GPUs, with our NVLinks, where we put them.
    gpus = dump.findall(".//gpu")
    assert sorted(int(g.get("dev")) for g in gpus) == list(range(8))
    for g in gpus:
        links = g.findall("nvlink")
        assert sum(int(n.get("count")) for n in links) == 18
        assert {n.get("target") for n in links} == {str(s.bus_id) for s in host.nvswitches}
    for cpu in ours.findall("cpu"):
        _same_attributes(cpu, dump.find(f"cpu[@numaid='{cpu.get('numaid')}']"))
    for pci in ours.iter("pci"):
        if pci.find("nic") is None:  # NICs come from the net plugin (next test)
            _same_attributes(pci, dump.find(f".//pci[@busid='{pci.get('busid')}']"))
    for g in ours.iter("gpu"):
        dumped = dump.find(f".//gpu[@dev='{g.get('dev')}']")
        _same_attributes(g, dumped)
        assert [n.attrib for n in g] == [n.attrib for n in dumped]
    # NCCL asks /sys only whether each GPU and switch exists (so that a real
    # device would win over the file), and finds nothing; it never asks about
    # NVSwitches (tclass given) and never reads a value from /sys.
    probed = {str(g.bus_id) for g in host.gpus} | {str(s.bus_id) for s in host.switches}
    assert _sys_lookups(log) == probed
    assert "Topology detection : could not read" not in log
    assert "assuming NVSwitch" not in log


@pytest.mark.e2e  # a second NCCL init: keeps the quick set under a minute
def test_nccl_places_the_plugins_nics(artifacts: list[HostArtifacts], clean_env: dict[str, str],
                                      lib_dir: Path, tmp_path: Path) -> None:
    plugin = lib_dir / NET_PLUGIN
    assert plugin.exists(), f"{plugin} is missing: the net plugin (fake_cuda/net) was not built"
    art = artifacts[0]
    env = {**_sim_env(clean_env, lib_dir, art, tmp_path), "NCCL_NET_PLUGIN": str(plugin),
           "NCCL_NET": "ncclsim", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,NET"}
    _run_probe(env)
    log = (tmp_path / "nccl.log").read_text()
    assert "Loaded net plugin ncclsim" in log
    dump = etree.parse(str(tmp_path / "dump.xml")).getroot()
    nets = dump.findall(".//net")
    assert [n.get("name") for n in nets] == [n.name for n in art.host.nics]
    for net, nic in zip(nets, art.host.nics):
        pci = net.getparent().getparent()
        # Placed where the file puts it: its own PCI device behind its GPU's switch.
        assert pci.get("busid") == str(nic.bus_id)
        assert pci.getparent().get("busid") == str(nic.switch)
        assert pci.getparent().find("pci/gpu") is not None
        assert (net.get("speed"), net.get("port")) == ("400000", "1")
        assert net.get("guid") == f"{nic.guid:#x}"
        assert net.get("gdr") == "1"  # the plugin takes device pointers
    # The plugin's NICs are found by name: NCCL never looks for them in /sys.
    assert not _sys_lookups(log) & {str(n.bus_id) for n in art.host.nics}
