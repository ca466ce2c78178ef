"""`ncclsim topo import`: a cluster spec (the preset format) from what a real
machine shows: an NCCL topology XML (NCCL's dump, or a hand-written
NCCL_TOPO_FILE) or the output of `nvidia-smi topo -m`.

Each reader gives a RawHost (raw.py), `assemble` makes it a preset, and
`render_spec` writes that as YAML. The text is then read back with the preset
parser and built into a host whose NCCL XML is rendered and validated, so a
spec that is written is one `topo generate` and `launch` accept.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from ncclsim.cluster.build import build_cluster, multicast_possible
from ncclsim.cluster.errors import ClusterError
from ncclsim.cluster.model import Host
from ncclsim.cluster.presets import Preset, parse_preset
from ncclsim.platform.models import GpuCatalog, load_models
from ncclsim.rundir import TOPO_DUMP
from ncclsim.topology.importers.assemble import assemble
from ncclsim.topology.importers.nccl_xml import read_nccl_xml
from ncclsim.topology.importers.nvidia_smi import read_nvidia_smi
from ncclsim.topology.importers.raw import RawHost, TopoImportError
from ncclsim.topology.importers.spec_writer import render_spec
from ncclsim.topology.validate import TopologyXmlError
from ncclsim.topology.xml_writer import TopologyXmlWriter

__all__ = ["ImportResult", "TopoImportError", "import_topology"]

KIND_XML = "NCCL topology XML"
KIND_SMI = "nvidia-smi topo -m"


@dataclass(frozen=True)
class ImportResult:
    source: Path  # the file read
    kind: str  # KIND_XML or KIND_SMI
    preset: Preset
    host: Host  # host 0 built from the spec
    text: str  # the spec, YAML
    notes: tuple[str, ...]  # what was assumed
    renumbered: dict[str, int]  # input bus id -> bus number in the spec, where they differ


def _read(path: Path) -> tuple[Path, str]:
    if path.is_dir() and (path / TOPO_DUMP).is_file():
        path = path / TOPO_DUMP  # a run directory: its NCCL dump
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TopoImportError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TopoImportError(f"{path}: is a directory without {TOPO_DUMP}; give one "
                              "file") from None
    except OSError as e:
        raise TopoImportError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return path, data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TopoImportError(f"{path}: not UTF-8 text (byte {e.start})") from None


def _kind(path: Path, text: str) -> str:
    if text.lstrip().startswith("<"):
        return KIND_XML
    if re.search(r"^\s*GPU0\s", text, re.M):
        return KIND_SMI
    raise TopoImportError(f"{path}: neither an NCCL topology XML (which starts with '<') nor "
                          "the output of `nvidia-smi topo -m` (a matrix with a GPU0 row)")


def _header(name: str, source: Path, kind: str, raw: RawHost,
            renumbered: dict[str, int]) -> list[str]:
    notes = raw.notes.lines()
    lines = [f"{name}: imported by `ncclsim topo import` from {source.name} ({kind}).", ""]
    if notes:
        lines += ["What the input did not say, and what was assumed (check these):"]
        lines += [f"* {n}" for n in notes]
    else:
        lines += ["The input gave everything this spec holds."]
    if renumbered:
        lines += ["", "Bus ids of the input and their bus numbers here (a preset has one "
                  "domain and device 0, function 0): " +
                  ", ".join(f"{k} -> 0x{v:02x}" for k, v in renumbered.items()) + "."]
    lines += ["", "Format: topologies/README.md. Edit freely; `ncclsim topo validate` checks it."]
    return lines


def _description(p: Preset, source: Path) -> str:
    gpus = p.gpus()
    models = sorted({g.model for g in gpus})
    nics = p.nics()
    speeds = sorted({n.speed_mbps for n in nics})
    nic_text = (f", {len(nics)} x {'/'.join(f'{s / 1000:g}' for s in speeds)} Gb/s NICs"
                if nics else "")
    return (f"imported from {source.name}: {len(p.sockets)} x {p.cpu.vendor} NUMA node(s), "
            f"{len(gpus)} x {'/'.join(models)}{nic_text}")


def import_topology(path: Path, output: Path, gpu_model: Optional[str] = None,
                    catalog: Optional[GpuCatalog] = None) -> ImportResult:
    """Read `path` and make the spec that is to be saved as `output` (its
    file name, without suffix, is the spec's name). Nothing is written."""
    catalog = catalog or load_models()
    if gpu_model is not None:
        gpu_model = catalog.get(gpu_model).key  # an unknown model fails here, naming the known
    source, text = _read(path)
    kind = _kind(source, text)
    raw = (read_nccl_xml(source, text, catalog, gpu_model) if kind == KIND_XML
           else read_nvidia_smi(source, text, catalog, gpu_model))
    name = output.stem
    assembled = assemble(raw, name, "", output)
    if not assembled.preset.nics():
        raw.notes.add("no NIC with a PCI device: between hosts NCCL runs its own socket "
                      "transport (NET/Socket), as on such a machine")
    # A dump does not say whether the NVSwitches offer multicast: the spec
    # says what the hardware has, for the user to turn off where it is not so.
    preset = dataclasses.replace(assembled.preset, description=_description(assembled.preset, source),
                                 multicast=multicast_possible(assembled.preset, catalog))
    spec = render_spec(preset, _header(name, source, kind, raw, assembled.renumbered))

    # Read back as `topo generate --spec` will; built, it must be the host imported.
    parsed = parse_preset(yaml.safe_load(spec), output)
    try:
        (host,) = build_cluster(parsed, hosts=1, catalog=catalog).hosts
        TopologyXmlWriter().render(host, name)
        (imported,) = build_cluster(preset, hosts=1, catalog=catalog).hosts
    except (ClusterError, TopologyXmlError) as e:
        raise TopoImportError(f"{source}: the imported machine is not one ncclsim can "
                              f"simulate: {e}") from None
    if host != imported:
        raise AssertionError(f"the spec written for {source} does not read back as imported")
    return ImportResult(source, kind, parsed, host, spec, tuple(raw.notes.lines()),
                        assembled.renumbered)

