"""`ncclsim topo import FILE -o SPEC.yaml`: a cluster spec from an NCCL
topology XML or `nvidia-smi topo -m` output (ncclsim/topology/importers/)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

from ncclsim.files import write_atomically
from ncclsim.platform.models import GpuCatalog
from ncclsim.rundir import TOPO_DUMP
from ncclsim.topology.host_summary import HostSummary

SCHEMA_VERSION = 1
SPEC_SUFFIXES = (".yaml", ".yml")


def add_parser(sub: Any) -> None:
    """The `import` action under `ncclsim topo`."""
    imp = sub.add_parser(
        "import", help="make a cluster spec from an NCCL topology XML or nvidia-smi topo -m",
        description="Read FILE, an NCCL topology XML (NCCL's NCCL_TOPO_DUMP_FILE, a run "
                    f"directory's {TOPO_DUMP}, or a hand-written NCCL_TOPO_FILE) or the output "
                    "of `nvidia-smi topo -m`, and write the host it describes as a cluster spec "
                    "in the preset format, for `topo generate --spec` and `launch --preset`. "
                    "What the input does not say is assumed and listed, in the output and at "
                    "the top of the spec.")
    imp.add_argument("file", type=Path, metavar="FILE",
                     help=f"the input; a run directory stands for its {TOPO_DUMP}")
    imp.add_argument("-o", "--output", type=Path, required=True, metavar="SPEC.yaml",
                     help="the spec to write (replaced); its name is the file name without "
                          ".yaml")
    imp.add_argument("--gpu-model", metavar="MODEL",
                     help="the GPUs' model, for inputs that do not tell it (nvidia-smi does "
                          "not; hand-written XML often does not)")
    imp.add_argument("--json", action="store_true", help="print a JSON summary")
    imp.set_defaults(topo_run=cmd_import)


def cmd_import(args: argparse.Namespace, out: TextIO, catalog: GpuCatalog) -> int:
    # The importers (and the XML writer they check with) load for this command only.
    from ncclsim.topology.importers import TopoImportError, import_topology
    output: Path = args.output.expanduser()
    if output.suffix not in SPEC_SUFFIXES or not output.stem:
        raise TopoImportError(f"-o {output}: a spec file ends in .yaml (or .yml), so that "
                              "`topo validate` and `launch --preset` know it")
    if output.is_dir():
        raise TopoImportError(f"-o {output}: is a directory")
    result = import_topology(args.file, output, args.gpu_model, catalog)
    write_atomically(output, result.text)
    output = output.resolve()
    summary = HostSummary.of_host(result.host)
    if args.json:
        doc: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "input": str(result.source.resolve()),
            "input_kind": result.kind, "output": str(output), "name": result.preset.name,
            **summary.to_json(), "notes": list(result.notes),
            "renumbered": {k: f"0x{v:02x}" for k, v in result.renumbered.items()}}
        json.dump(doc, out, indent=2)
        out.write("\n")
        return 0
    out.write(f"{result.source} ({result.kind}) -> {output}: {summary.text()}\n")
    for note in result.notes:
        out.write(f"  note: {note}\n")
    if result.renumbered:
        out.write(f"  {len(result.renumbered)} bus ids renumbered (listed in the spec's "
                  "header)\n")
    return 0
