"""`ncclsim topo`: cluster topologies as files.

    ncclsim topo generate (--preset P | --spec FILE) [--hosts N] [--gpus G] [--nics M] -o DIR
        DIR/h<i>/topo.xml (NCCL_TOPO_FILE) and DIR/h<i>/platform.conf (NCCLSIM_PLATFORM)
    ncclsim topo validate FILE
        an NCCL topology XML, or a preset/spec YAML (*.yaml, *.yml)
    ncclsim topo render SOURCE -o OUT.svg|OUT.png [--channel N] [--json]
        a picture of a preset, spec, XML or run directory (render_cli.py)
    ncclsim topo import FILE -o SPEC.yaml [--gpu-model M] [--json]
        a spec from an NCCL topology XML or `nvidia-smi topo -m` output (import_cli.py)

Errors are NcclsimError: the caller prints them as one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, TextIO

from lxml import etree

from ncclsim import NcclsimError
from ncclsim.cluster.artifacts import HostArtifacts
from ncclsim.cluster.build import build_cluster
from ncclsim.cluster.model import Cluster, Host
from ncclsim.cluster.platform_config import platform_config
from ncclsim.cluster.presets import DEFAULT_PRESET, Preset, available_presets, load_preset
from ncclsim.platform.config import write_platform
from ncclsim.platform.models import GpuCatalog, load_models
from ncclsim.topology import import_cli
from ncclsim.topology import render_cli
from ncclsim.topology.validate import BRIDGE_CLASSES, validate_topology
from ncclsim.topology.xml_writer import TopologyXmlWriter

SCHEMA_VERSION = 1
PRESET_SUFFIXES = (".yaml", ".yml")
TOPO_XML = "topo.xml"
PLATFORM_CONF = "platform.conf"


class TopoCliError(NcclsimError):
    """An input file that cannot be read at all."""


# ---- arguments ----

def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="topo_command", metavar="ACTION", required=True)

    gen = sub.add_parser(
        "generate", help="write each host's NCCL topology XML and platform file",
        description="Build a cluster from a preset or a spec file and write, per host, "
                    f"DIR/h<i>/{TOPO_XML} (NCCL_TOPO_FILE) and DIR/h<i>/{PLATFORM_CONF} "
                    "(NCCLSIM_PLATFORM).")
    source = gen.add_mutually_exclusive_group()
    source.add_argument("--preset", metavar="P",
                        help=f"a preset of topologies/ (default {DEFAULT_PRESET}; "
                             f"available: {', '.join(available_presets()) or 'none'})")
    source.add_argument("--spec", type=Path, metavar="FILE",
                        help="a cluster spec of your own, in the preset format "
                             "(topologies/README.md)")
    gen.add_argument("--hosts", type=int, default=1, metavar="N", help="hosts (default 1)")
    gen.add_argument("--gpus", type=int, metavar="G",
                     help="keep the first G GPUs of each host (default: all)")
    gen.add_argument("--nics", type=int, metavar="M",
                     help="keep the first M NICs of each host (default: all)")
    gen.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                     help="output directory (created; files in it are replaced)")
    gen.add_argument("--json", action="store_true", help="print a JSON summary")

    val = sub.add_parser(
        "validate", help="check an NCCL topology XML or a preset/spec YAML",
        description="Check FILE as NCCL would read it: an NCCL topology XML (errors name the "
                    "line, element and attribute), or, for *.yaml/*.yml, a cluster spec in the "
                    "preset format (errors name the key path). Prints a summary when it is "
                    "fine; exit status 2 with one line otherwise.")
    val.add_argument("file", type=Path, metavar="FILE")
    val.add_argument("--json", action="store_true", help="print the summary as JSON")

    render_cli.add_parser(sub)  # `topo render`: pictures (ncclsim/topology/render_cli.py)
    import_cli.add_parser(sub)  # `topo import`: a spec from NCCL XML or nvidia-smi topo -m


def execute(args: argparse.Namespace, out: TextIO, catalog: Optional[GpuCatalog] = None) -> int:
    catalog = catalog or load_models()
    if args.topo_command == "generate":
        return cmd_generate(args, out, catalog)
    if args.topo_command == "render":
        return render_cli.cmd_render(args, out, catalog)
    if args.topo_command == "import":
        return import_cli.cmd_import(args, out, catalog)
    return cmd_validate(args, out, catalog)


# ---- summaries ----

@dataclass(frozen=True)
class HostSummary:
    """What one host holds, in the terms the preset docs and NCCL's dump use."""
    sockets: int
    gpus: int
    nvlinks_per_gpu: tuple[int, ...]
    nics: int
    nic_speeds_mbps: tuple[int, ...]
    pci_switches: int

    @classmethod
    def of_host(cls, h: Host) -> HostSummary:
        return cls(len(h.sockets), len(h.gpus), tuple(g.nvlink_count for g in h.gpus),
                   len(h.nics), tuple(n.speed_mbps for n in h.nics), len(h.switches))

    @classmethod
    def of_xml(cls, root: Any) -> HostSummary:
        gpus = root.findall(".//gpu")
        nets = root.findall(".//net")
        return cls(len(root.findall("cpu")), len(gpus),
                   tuple(sum(int(n.get("count")) for n in g.findall("nvlink")) for g in gpus),
                   len(nets), tuple(int(n.get("speed", "0")) for n in nets),
                   sum(1 for p in root.iter("pci") if p.get("class") in BRIDGE_CLASSES))

    def text(self) -> str:
        links = sorted(set(self.nvlinks_per_gpu))
        nvl = ("no NVLink" if links in ([], [0]) else
               f"{'/'.join(map(str, links))} NVLinks per GPU")
        speeds = sorted({s for s in self.nic_speeds_mbps if s > 0})  # 0: left to the plugin
        nics = _n(self.nics, "NIC") + (
            f" ({'/'.join(_gbps(s) for s in speeds)})" if speeds else "")
        return (f"{_n(self.gpus, 'GPU')} ({nvl}), {nics}, {_n(self.pci_switches, 'PCI switch')}, "
                f"{_n(self.sockets, 'socket')}")

    def to_json(self) -> dict[str, Any]:
        return {"sockets": self.sockets, "gpus": self.gpus,
                "nvlinks_per_gpu": list(self.nvlinks_per_gpu), "nics": self.nics,
                "nic_speeds_mbps": list(self.nic_speeds_mbps), "pci_switches": self.pci_switches}


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "es" if noun.endswith("ch") else "s")


def _gbps(mbps: int) -> str:
    return f"{mbps / 1000:g} Gb/s"


def _emit_json(out: TextIO, doc: dict[str, Any]) -> None:
    json.dump({"schema_version": SCHEMA_VERSION, **doc}, out, indent=2)
    out.write("\n")


# ---- generate ----

def _load_source(args: argparse.Namespace) -> Preset:
    if args.spec is None:
        return load_preset(args.preset or DEFAULT_PRESET)
    spec: Path = args.spec
    if not spec.is_file():
        raise TopoCliError(f"--spec {spec}: no such file")
    # An absolute path is always taken as a file, never as a preset name.
    return load_preset(str(spec.resolve()))


def write_hosts(cluster: Cluster, out_dir: Path,
                catalog: Optional[GpuCatalog] = None) -> list[HostArtifacts]:
    """DIR/h<i>/topo.xml and DIR/h<i>/platform.conf for every host (the layout
    users hand to their own launchers; `launch` keeps its own run directory)."""
    catalog = catalog or load_models()
    writer = TopologyXmlWriter()
    written = []
    for host in cluster.hosts:
        d = out_dir / f"h{host.index}"
        conf, topo = d / PLATFORM_CONF, d / TOPO_XML
        write_platform(platform_config(host, catalog), conf, catalog)
        writer.write(host, topo, cluster.preset)
        written.append(HostArtifacts(host, d, conf, topo))
    return written


def cmd_generate(args: argparse.Namespace, out: TextIO, catalog: GpuCatalog) -> int:
    preset = _load_source(args)
    cluster = build_cluster(preset, hosts=args.hosts, gpus=args.gpus, nics=args.nics,
                            catalog=catalog)
    # Absolute paths: the summary is handed to launchers running elsewhere.
    output = args.output.expanduser().resolve()
    written = write_hosts(cluster, output, catalog)
    if args.json:
        _emit_json(out, {
            "preset": preset.name, "source": str(preset.source), "output_dir": str(output),
            "hosts": [{"index": a.host.index, "hostname": a.host.hostname,
                       "pci_domain": f"{a.host.domain:04x}",
                       "topo_xml": str(a.topo_xml), "platform_conf": str(a.platform_conf),
                       "env": a.environment(), **HostSummary.of_host(a.host).to_json()}
                      for a in written]})
        return 0
    summary = HostSummary.of_host(written[0].host)
    out.write(f"{preset.name}: {_n(len(written), 'host')} of {summary.text()} -> {output}\n")
    for a in written:
        out.write(f"  h{a.host.index}  {a.topo_xml}  {a.platform_conf}  "
                  f"(NCCL_HOSTID={a.host.host_id}, PCI domain {a.host.domain:04x})\n")
    return 0


# ---- validate ----

def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TopoCliError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TopoCliError(f"{path}: is a directory; give one file") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TopoCliError(f"{path}: not UTF-8 text (byte {e.start})") from None


def _validate_xml(path: Path) -> HostSummary:
    text = _read_text(path)
    validate_topology(text, source=str(path))
    return HostSummary.of_xml(etree.fromstring(text.encode()))


def _validate_spec(path: Path, catalog: GpuCatalog) -> tuple[str, HostSummary]:
    if not path.is_file():
        raise TopoCliError(f"{path}: no such file")
    preset = load_preset(str(path.resolve()))
    # Building one host catches what the format alone cannot (unknown GPU model,
    # more NVLinks than the model has); rendering validates its XML.
    (host,) = build_cluster(preset, hosts=1, catalog=catalog).hosts
    TopologyXmlWriter().render(host, preset.name)
    return preset.name, HostSummary.of_host(host)


def cmd_validate(args: argparse.Namespace, out: TextIO, catalog: GpuCatalog) -> int:
    path: Path = args.file
    if path.suffix in PRESET_SUFFIXES:
        name, summary = _validate_spec(path, catalog)
        kind, what = "spec", f"cluster spec {name!r}, per host"
    else:
        summary = _validate_xml(path)
        kind, what = "topology", "NCCL topology"
    if args.json:
        _emit_json(out, {"file": str(path), "kind": kind, "ok": True, **summary.to_json()})
    else:
        out.write(f"ok: {path}: {what}: {summary.text()}\n")
    return 0
