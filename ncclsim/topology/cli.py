"""`ncclsim topo`: cluster topologies as files.

    ncclsim topo generate (--preset P | --spec FILE | --topo FILE) [--hosts N] [--gpus G] [--nics M] -o DIR
        DIR/h<i>/topo.xml (NCCL_TOPO_FILE) and DIR/h<i>/platform.conf (NCCLSIM_PLATFORM)
    ncclsim topo validate FILE
        an NCCL topology XML, or a preset/spec YAML (*.yaml, *.yml)
    ncclsim topo render SOURCE -o OUT.svg|OUT.png [--channel N] [--json]
        a picture of a preset, spec, XML or run directory (ncclsim/render/, added by ncclsim.cli)
    ncclsim topo import FILE -o SPEC.yaml [--gpu-model M] [--json]
        a spec from an NCCL topology XML or `nvidia-smi topo -m` output (import_cli.py)

Errors are NcclsimError: the caller prints them as one line and exits 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional, Sequence, TextIO

from ncclsim import NcclsimError
from ncclsim.commands import add_command, emit_json
from ncclsim.cluster.build import build_cluster
from ncclsim.cluster.presets import DEFAULT_PRESET, Preset, available_presets, load_preset
from ncclsim.platform.models import GpuCatalog, load_models
from ncclsim.rundir import TOPO_SPEC
from ncclsim.topology import import_cli, topo_option
from ncclsim.topology.host_summary import HostSummary, plural
from ncclsim.topology.validate import validate_topology

SCHEMA_VERSION = 1
PRESET_SUFFIXES = (".yaml", ".yml")


class TopoCliError(NcclsimError):
    """An input file that cannot be read at all."""


# ---- arguments ----

def register(sub: Any, actions: Sequence[Any] = ()) -> None:
    """`ncclsim topo ACTION`. `actions`: modules adding further actions with
    `add_parser(sub)` (`render`, which also draws runs and so lives above the
    report package)."""
    add_command(sub, "topo", "generate, validate, import and draw topologies (presets, NCCL XML)",
                "Cluster topologies as files: per-host NCCL topology XML and platform files from a preset, "
                "their validation, specs imported from real machines, and pictures.",
                lambda p: add_arguments(p, actions), lambda args, environ, out: execute(args, out))


def add_arguments(p: argparse.ArgumentParser, actions: Sequence[Any] = ()) -> None:
    """Each action's parser sets `topo_run(args, out, catalog)`."""
    sub = p.add_subparsers(dest="topo_command", metavar="ACTION", required=True)

    gen = sub.add_parser(
        "generate", help="write each host's NCCL topology XML and platform file",
        description="Build a cluster from a preset or a spec file and write, per host, "
                    "DIR/h<i>/topo.xml (NCCL_TOPO_FILE), DIR/h<i>/platform.conf (NCCLSIM_PLATFORM) and "
                    "DIR/h<i>/env (both, and the host's name, as `export` lines).")
    source = gen.add_mutually_exclusive_group()
    source.add_argument("--preset", metavar="P",
                        help=f"a preset of topologies/ (default {DEFAULT_PRESET}; "
                             f"available: {', '.join(available_presets()) or 'none'})")
    source.add_argument("--spec", type=Path, metavar="FILE",
                        help="a cluster spec of your own, in the preset format "
                             "(topologies/README.md)")
    topo_option.add_arguments(source, f"DIR/{TOPO_SPEC}")
    gen.add_argument("--hosts", type=int, default=1, metavar="N", help="hosts (default 1)")
    gen.add_argument("--gpus", type=int, metavar="G",
                     help="keep the first G GPUs of each host (default: all)")
    gen.add_argument("--nics", type=int, metavar="M",
                     help="keep the first M NICs of each host (default: all)")
    topo_option.add_gpu_model(gen)
    gen.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                     help="output directory (created; files in it are replaced)")
    gen.add_argument("--json", action="store_true", help="print a JSON summary")
    gen.set_defaults(topo_run=cmd_generate)

    val = sub.add_parser(
        "validate", help="check an NCCL topology XML or a preset/spec YAML",
        description="Check FILE: an NCCL topology XML as NCCL would read it (errors name the "
                    "line, element and attribute; notes say what NCCL reads from the machine "
                    "or ignores), and whether ncclsim can simulate the machine it describes "
                    "(notes say what is assumed, as `topo import` does); or, for *.yaml/*.yml, a "
                    "cluster spec in the preset format (errors name the key path). Prints a "
                    "summary when it is fine; exit status 2 with one line otherwise.")
    val.add_argument("file", type=Path, metavar="FILE")
    val.add_argument("--gpu-model", metavar="MODEL",
                     help="the GPUs' model, for an XML that does not tell it")
    val.add_argument("--json", action="store_true", help="print the summary as JSON")
    val.set_defaults(topo_run=cmd_validate)

    for action in actions:
        action.add_parser(sub)
    import_cli.add_parser(sub)  # `topo import`: a spec from NCCL XML or nvidia-smi topo -m


def execute(args: argparse.Namespace, out: TextIO) -> int:
    return int(args.topo_run(args, out, load_models()))


# ---- output ----

def _emit_json(out: TextIO, doc: dict[str, Any]) -> None:
    emit_json(out, doc, SCHEMA_VERSION)


# ---- generate ----

def _load_source(args: argparse.Namespace) -> Preset:
    topo_option.check(args.topo, args.gpu_model)
    if args.topo is not None:
        imported = topo_option.imported(args.topo, args.output.expanduser().resolve() / TOPO_SPEC,
                                        args.gpu_model)
        args.output.mkdir(parents=True, exist_ok=True)
        (args.output / TOPO_SPEC).write_text(imported.text)
        return imported.preset
    if args.spec is None:
        return load_preset(args.preset or DEFAULT_PRESET)
    spec: Path = args.spec
    if not spec.is_file():
        raise TopoCliError(f"--spec {spec}: no such file")
    # An absolute path is always taken as a file, never as a preset name.
    return load_preset(str(spec.resolve()))


def cmd_generate(args: argparse.Namespace, out: TextIO, catalog: GpuCatalog) -> int:
    preset = _load_source(args)
    cluster = build_cluster(preset, hosts=args.hosts, gpus=args.gpus, nics=args.nics,
                            catalog=catalog)
    # Absolute paths: the summary is handed to launchers running elsewhere.
    output = args.output.expanduser().resolve()
    from ncclsim.topology.host_artifacts import write_host_artifacts  # jinja2: only when writing XML
    written = write_host_artifacts(cluster, output, catalog)
    if args.json:
        _emit_json(out, {
            "preset": preset.name, "source": str(preset.source), "output_dir": str(output),
            "hosts": [{"index": a.host.index, "hostname": a.host.hostname,
                       "pci_domain": f"{a.host.domain:04x}",
                       "topo_xml": str(a.topo_xml), "platform_conf": str(a.platform_conf),
                       "env_file": str(a.files.env), "env": a.environment(), **HostSummary.of_host(a.host).to_json()}
                      for a in written]})
        return 0
    summary = HostSummary.of_host(written[0].host)
    out.write(f"{preset.name}: {plural(len(written), 'host')} of {summary.text()} -> {output}\n")
    for a in written:
        out.write(f"  h{a.host.index}  {a.topo_xml}  {a.platform_conf}  {a.files.env}  "
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


def _validate_xml(path: Path, gpu_model: Optional[str]) -> tuple[HostSummary, list[str], list[str]]:
    """NCCL's view of the file, and what simulating it assumes (or why it cannot)."""
    text = _read_text(path)
    notes = validate_topology(text, source=str(path), complete=False)
    from ncclsim.topology.importers import TopoImportError, import_topology  # only for XML
    try:
        simulated = import_topology(path, Path(f"{path.stem}.yaml"), gpu_model)
    except TopoImportError as e:
        raise TopoCliError(f"NCCL reads it, but ncclsim cannot simulate it: {e}") from None
    # Counted as simulated: a class-only file's GPUs have no <gpu> for NCCL to show yet.
    return HostSummary.of_host(simulated.host), notes, list(simulated.notes)


def _validate_spec(path: Path, catalog: GpuCatalog) -> tuple[str, HostSummary]:
    if not path.is_file():
        raise TopoCliError(f"{path}: no such file")
    preset = load_preset(str(path.resolve()))
    # Building one host catches what the format alone cannot (unknown GPU model,
    # more NVLinks than the model has); rendering validates its XML.
    (host,) = build_cluster(preset, hosts=1, catalog=catalog).hosts
    from ncclsim.topology.xml_writer import TopologyXmlWriter  # jinja2: only when writing XML
    TopologyXmlWriter().render(host, preset.name)
    return preset.name, HostSummary.of_host(host)


def cmd_validate(args: argparse.Namespace, out: TextIO, catalog: GpuCatalog) -> int:
    path: Path = args.file
    notes: list[str] = []
    assumed: list[str] = []  # what simulating it assumes (an XML's)
    if path.suffix in PRESET_SUFFIXES:
        if args.gpu_model:
            raise TopoCliError("--gpu-model names the model of an XML's GPUs; a spec says its own")
        name, summary = _validate_spec(path, catalog)
        kind, what = "spec", f"cluster spec {name!r}, per host"
    else:
        summary, notes, assumed = _validate_xml(path, args.gpu_model)
        kind, what = "topology", "NCCL topology"
    if args.json:
        _emit_json(out, {"file": str(path), "kind": kind, "ok": True, **summary.to_json(),
                         "notes": notes, "simulation_notes": assumed})
    else:
        out.write(f"ok: {path}: {what}: {summary.text()}\n")
        out.writelines(f"  note: {n}\n" for n in notes)
        if assumed:
            out.write("  simulated as `ncclsim topo import` makes it, assuming:\n")
            out.writelines(f"    {n}\n" for n in assumed)
    return 0
