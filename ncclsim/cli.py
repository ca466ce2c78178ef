"""The `ncclsim` command: simulated multi-host GPU platforms for unmodified NCCL.

Each sub-command lives with its package (its `cli` module's `register`);
this module only puts them together."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Mapping, NoReturn, Optional, Sequence, TextIO

from ncclsim import NcclsimError, __version__
from ncclsim.platform.models import GpuCatalog, load_models

# The module registering each sub-command, with the names it registers, in
# the order `ncclsim --help` lists them (`topo` gets `render` added to it).
# A command line imports only its command's module: all of them take longer
# to import than most commands take to run.
COMMANDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("env", "info", "platform"), "ncclsim.platform.cli"),
    (("probe",), "ncclsim.probe.cli"),
    (("launch",), "ncclsim.launch.cli"),
    (("clean",), "ncclsim.launch.clean_cli"),
    (("report",), "ncclsim.report.cli"),
    (("diff",), "ncclsim.report.diff_cli"),
    (("sweep",), "ncclsim.sweep.cli"),
    (("topo",), "ncclsim.topology.cli"),
)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit 2, like every other ncclsim error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(catalog: GpuCatalog, argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The parser of every command, or only of the one `argv` names."""
    parser = _Parser(prog="ncclsim", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"ncclsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    named = next((a for a in argv or () if not a.startswith("-")), None)
    chosen = [m for names, m in COMMANDS if named in names] or [m for _, m in COMMANDS]
    for name in chosen:
        module = importlib.import_module(name)
        if name == "ncclsim.topology.cli":
            module.register(sub, catalog, actions=(importlib.import_module("ncclsim.render.cli"),))
        else:
            module.register(sub, catalog)
    return parser


def main(argv: Optional[list[str]] = None, environ: Optional[Mapping[str, str]] = None,
         out: Optional[TextIO] = None) -> int:
    try:
        catalog = load_models()
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser(catalog, argv).parse_args(argv)
        return int(args.func(args, os.environ if environ is None else environ,
                             out or sys.stdout, catalog))
    except (NcclsimError, OSError) as e:
        print(f"ncclsim: error: {e}", file=sys.stderr)
        return 2
