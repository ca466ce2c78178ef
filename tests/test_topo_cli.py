"""`ncclsim topo generate` and `ncclsim topo validate`, through the installed
console script: the files written, the summaries printed, and one clear line
with exit status 2 for every bad input."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from ncclsim.platform.config import read_platform
from ncclsim.topology.validate import validate_topology

RunCli = Callable[..., "subprocess.CompletedProcess[str]"]

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


def _one_error_line(proc: "subprocess.CompletedProcess[str]", fragment: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert re.search(fragment, lines[0]), lines[0]
    assert proc.stdout == ""


# ---- generate ----

def test_generate_writes_each_hosts_files(run_cli: RunCli, tmp_path: Path) -> None:
    proc = run_cli("topo", "generate", "--preset", "dgx-a100", "--hosts", "2", "-o", "out")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "h0/env", "h0/platform.conf", "h0/topo.xml", "h1/env", "h1/platform.conf", "h1/topo.xml"]
    assert proc.stdout.startswith("dgx-a100: 2 hosts of 8 GPUs (12 NVLinks per GPU), "
                                  "8 NICs (200 Gb/s), 12 PCI switches, 2 sockets")
    for i in (0, 1):
        assert f"out/h{i}/topo.xml" in proc.stdout and f"NCCL_HOSTID=ncclsim-h{i}" in proc.stdout
        platform = read_platform(out / f"h{i}" / "platform.conf")
        assert platform.host_index == i and len(platform.gpus) == 8 and len(platform.nics) == 8
        domain = platform.gpus[0].bus_id.domain
        validate_topology((out / f"h{i}" / "topo.xml").read_text(), domain=domain)
    # Two hosts never share a PCI domain (NCCL tells hosts apart by it, too).
    doms = {read_platform(out / f"h{i}" / "platform.conf").gpus[0].bus_id.domain for i in (0, 1)}
    assert len(doms) == 2


def test_generate_json_summary(run_cli: RunCli, tmp_path: Path) -> None:
    proc = run_cli("topo", "generate", "--preset", "pcie-l40s", "--gpus", "3", "--nics", "1",
                   "-o", "out", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 1 and doc["preset"] == "pcie-l40s"
    (host,) = doc["hosts"]
    assert (host["gpus"], host["nvlinks_per_gpu"], host["nics"], host["nic_speeds_mbps"]) == (
        3, [0, 0, 0], 1, [200000])
    assert host["pci_switches"] == 2  # the socket-0 switches; the others are left empty
    assert host["env"]["NCCL_TOPO_FILE"] == host["topo_xml"]
    assert Path(host["topo_xml"]).is_file() and Path(host["platform_conf"]).is_file()


def test_generate_from_a_spec_file(run_cli: RunCli, tmp_path: Path) -> None:
    # A user's own spec: a preset copied and edited; its name follows the file.
    text = (TOPOLOGIES / "hgx-h100-4nic.yaml").read_text()
    spec = tmp_path / "my-box.yaml"
    spec.write_text(text.replace("name: hgx-h100-4nic", "name: my-box").replace(
        "speed: 400000", "speed: 200000"))
    proc = run_cli("topo", "generate", "--spec", str(spec), "-o", "out", "--json")
    assert proc.returncode == 0, proc.stderr
    (host,) = json.loads(proc.stdout)["hosts"]
    assert host["nic_speeds_mbps"] == [200000] * 4
    assert 'name="my-box/ncclsim-h0"' in Path(host["topo_xml"]).read_text()


def test_generate_defaults_to_dgx_h100(run_cli: RunCli) -> None:
    proc = run_cli("topo", "generate", "-o", "out")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("dgx-h100: 1 host of 8 GPUs (18 NVLinks per GPU)")


@pytest.mark.parametrize("args,fragment", [
    (["--preset", "dgx-a999"], r"unknown preset 'dgx-a999': available presets are dgx-a100, "),
    (["--preset", "dgx-a100", "--gpus", "9"], r"--gpus 9: preset dgx-a100 has 8 GPUs per host"),
    (["--preset", "pcie-l40s", "--gpus", "0"], r"--gpus 0: .* choose 1\.\.8"),
    (["--gpus", "eight"], r"argument --gpus: invalid int value: 'eight'"),
    (["--preset", "dgx-a100", "--nics", "9"], r"--nics 9: preset dgx-a100 has 8 NICs"),
    (["--hosts", "0"], r"--hosts 0: a cluster has 1\.\."),
    (["--spec", "missing.yaml"], r"--spec missing\.yaml: no such file"),
    (["--preset", "dgx-a100", "--spec", "x.yaml"], r"not allowed with argument --preset"),
])
def test_generate_rejects(run_cli: RunCli, tmp_path: Path, args: list[str], fragment: str) -> None:
    _one_error_line(run_cli("topo", "generate", *args, "-o", "out"), fragment)
    assert not (tmp_path / "out").exists()


def test_generate_needs_an_output_directory(run_cli: RunCli) -> None:
    _one_error_line(run_cli("topo", "generate", "--preset", "dgx-a100"),
                    r"required: -o/--output")


# ---- validate ----

@pytest.fixture(scope="module")
def generated_xml(ncclsim_exe: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen")
    subprocess.run([str(ncclsim_exe), "topo", "generate", "--preset", "dgx-h100", "-o", str(out)], check=True)
    return out / "h0" / "topo.xml"


@pytest.fixture
def topo_xml(generated_xml: Path, tmp_path: Path) -> Path:
    """A generated host's topology file of the test's own, to read or edit."""
    path = tmp_path / "gen" / "h0" / "topo.xml"
    path.parent.mkdir(parents=True)
    shutil.copyfile(generated_xml, path)
    return path


def test_validate_accepts_a_topology(run_cli: RunCli, topo_xml: Path) -> None:
    proc = run_cli("topo", "validate", str(topo_xml))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (f"ok: {topo_xml}: NCCL topology: 8 GPUs (18 NVLinks per GPU), "
                           "8 NICs (400 Gb/s), 8 PCI switches, 2 sockets\n")
    doc = json.loads(run_cli("topo", "validate", "--json", str(topo_xml)).stdout)
    assert (doc["schema_version"], doc["kind"], doc["gpus"]) == (1, "topology", 8)


def test_validate_notes_a_vm_nvlink_target(run_cli: RunCli, topo_xml: Path) -> None:
    vm = topo_xml.parent / "vm.xml"
    # As NCCL writes it in a VM: one target that is no device, all 18 NVLinks.
    text = re.sub(r'(<nvlink [^>]*/>\s*)+',
                  '<nvlink target="fffffff:ff:ff.0" count="18" tclass="0x068000"/>\n',
                  topo_xml.read_text())
    assert text.count('target="fffffff:ff:ff.0" count="18"') == 8
    vm.write_text(text)
    proc = run_cli("topo", "validate", str(vm))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"ok: {vm}: NCCL topology: 8 GPUs (18 NVLinks per GPU)")
    assert lines[1].startswith('  note: <nvlink> target="fffffff:ff:ff.0"')
    assert lines[2:] == ["  simulated as `ncclsim topo import` makes it, assuming:",
                         '    NVLink target "fffffff:ff:ff.0" is no device (written in VMs, where the NVSwitch '
                         "is not visible): an NVSwitch, as NCCL takes it (x8)"]
    doc = json.loads(run_cli("topo", "validate", "--json", str(vm)).stdout)
    assert len(doc["notes"]) == 1 and "NVSwitch" in doc["notes"][0]
    assert len(doc["simulation_notes"]) == 1


@pytest.mark.parametrize("preset", ["dgx-a100", "hgx-h100-4nic", "pcie-l40s"])
def test_validate_accepts_the_presets(run_cli: RunCli, preset: str) -> None:
    proc = run_cli("topo", "validate", str(TOPOLOGIES / f"{preset}.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"ok: {TOPOLOGIES / preset}.yaml: cluster spec '{preset}'")


Edit = Callable[[str], str]


def _replace(old: str, new: str) -> Edit:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)
    return edit


@pytest.mark.parametrize("edit,fragment", [
    (_replace("</gpu>", "</gpux>"), r"topo\.xml:\d+: not well-formed XML: .*mismatch"),
    (_replace(' busid="0000:16:00.0"', ""), r"topo\.xml:4: <pci>: missing busid"),
    (_replace('sm="90"', 'sm="ninety"'), r'topo\.xml:\d+: <gpu> sm="ninety": must be'),
    (_replace('class="0x030200"', 'class="0x0302"'), r'topo\.xml:\d+: <pci> class="0x0302": must be a 6-digit'),
    (_replace("<system ", "<sytem "), r"topo\.xml:\d+: "),
    (lambda t: t + "garbage", r"topo\.xml:\d+: NCCL expects '<' here"),
])
def test_validate_rejects_a_broken_topology(run_cli: RunCli, topo_xml: Path, edit: Edit,
                                            fragment: str) -> None:
    topo_xml.write_text(edit(topo_xml.read_text()))
    _one_error_line(run_cli("topo", "validate", str(topo_xml)), fragment)


def test_validate_takes_what_nccl_reads_from_the_machine(run_cli: RunCli, topo_xml: Path) -> None:
    # Provider files leave out what NCCL reads from /sys: PCI ids, link widths; a
    # speed NCCL cannot parse it takes as Gen3. Notes, not errors; and ncclsim says
    # what it assumes to simulate the machine.
    text = re.sub(r' vendor="0x10de" device="0x2330" subsystem_vendor="0x10de" subsystem_device="0x16c1"', "",
                  topo_xml.read_text())
    text = text.replace(' link_width="16"', "", 1).replace('link_speed="32.0 GT/s PCIe"', 'link_speed="Gen5"', 1)
    topo_xml.write_text(text)
    proc = run_cli("topo", "validate", str(topo_xml))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith(f"ok: {topo_xml}: NCCL topology: 8 GPUs (18 NVLinks per GPU)"), out
    for fragment in ("note: <pci> without vendor, device, subsystem_vendor, subsystem_device: NCCL reads them "
                     "from the machine (/sys)", "note: <pci> without link_width: NCCL reads them",
                     'note: <pci> link_speed="Gen5" is not a speed NCCL knows (it would assume 8 GT/s)',
                     "    PCI link speed 'Gen5' missing or unknown: 8.0 GT/s PCIe, as NCCL reads it"):
        assert fragment in out, out
    # A file whose GPU model nothing tells: NCCL reads it, ncclsim needs the model.
    bare = re.sub(r'<gpu dev="(\d)" sm="90"', r'<gpu dev="\1"', text)
    bare = re.sub(r' vendor="0x[0-9a-f]+" device="0x[0-9a-f]+" subsystem_vendor="0x[0-9a-f]+" '
                  r'subsystem_device="0x[0-9a-f]+"', "", bare)
    topo_xml.write_text(bare)
    _one_error_line(run_cli("topo", "validate", str(topo_xml)),
                    r"NCCL reads it, but ncclsim cannot simulate it: .*topo\.xml:\d+: .*cannot tell the GPU "
                    r"model.*give --gpu-model")
    proc = run_cli("topo", "validate", str(topo_xml), "--gpu-model", "h100")
    assert proc.returncode == 0 and "8 GPUs (18 NVLinks per GPU)" in proc.stdout, proc.stderr


@pytest.mark.parametrize("edit,fragment", [
    (_replace("  - [0x06, 5]", "  - [0x06, five]"),
     r"dgx-h100\.yaml: gpu_nvlinks\[1\]\[1\]: expected an integer"),
    (_replace("  speed: 400000", "  speed: fast"),
     r"dgx-h100\.yaml: sockets\[0\]\.switches\[0\]\.nics\[0\]\.speed: expected an integer"),
    (_replace("gpu_model: h100", "gpu_model: h900"), r"h900"),
    (_replace("format: 1", "format: 2"), r"dgx-h100\.yaml: top level: format 2 is not supported"),
    (_replace("sockets:", "sockets: ["), r"dgx-h100\.yaml:\d+:\d+: not valid YAML"),
])
def test_validate_rejects_a_broken_spec(run_cli: RunCli, tmp_path: Path, edit: Edit,
                                        fragment: str) -> None:
    spec = tmp_path / "dgx-h100.yaml"
    spec.write_text(edit((TOPOLOGIES / "dgx-h100.yaml").read_text()))
    _one_error_line(run_cli("topo", "validate", str(spec)), fragment)


def test_validate_rejects_what_is_no_file(run_cli: RunCli, tmp_path: Path) -> None:
    _one_error_line(run_cli("topo", "validate", "nothing.xml"), r"nothing\.xml: no such file")
    _one_error_line(run_cli("topo", "validate", str(tmp_path)), r"is a directory")
    (tmp_path / "binary.xml").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    _one_error_line(run_cli("topo", "validate", "binary.xml"), r"binary\.xml: not UTF-8 text")


def test_topo_lists_its_actions(run_cli: RunCli) -> None:
    proc = run_cli("topo", "--help")
    assert proc.returncode == 0 and "generate" in proc.stdout and "validate" in proc.stdout
    _one_error_line(run_cli("topo"), r"required: ACTION")


# ---- the documentation's example ----

DOCS = Path(__file__).resolve().parent.parent / "docs" / "presets.md"


def test_the_documented_spec_example_is_valid(run_cli: RunCli, tmp_path: Path) -> None:
    text = DOCS.read_text()
    (spec,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "format: 1" in b]
    name = re.search(r"^name: (\S+)", spec, re.M).group(1)  # type: ignore[union-attr]
    (tmp_path / f"{name}.yaml").write_text(spec)
    proc = run_cli("topo", "validate", f"{name}.yaml")
    assert proc.returncode == 0, proc.stderr
    # The output the docs show, verbatim.
    assert f"# {proc.stdout.strip()}\n" in text
