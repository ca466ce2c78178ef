"""The `ncclsim` command: simulated multi-host GPU platforms for unmodified NCCL.

Each sub-command lives with its package (its `cli` module's `register`);
this module only puts them together."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Mapping, NoReturn, Optional, TextIO

from ncclsim import NcclsimError, __version__
from ncclsim.launch import clean_cli as launch_clean_cli
from ncclsim.launch import cli as launch_cli
from ncclsim.platform import cli as platform_cli
from ncclsim.platform.models import GpuCatalog, load_models
from ncclsim.probe import cli as probe_cli
from ncclsim.report import cli as report_cli
from ncclsim.render import cli as render_cli
from ncclsim.report import diff_cli as report_diff_cli
from ncclsim.sweep import cli as sweep_cli
from ncclsim.topology import cli as topo_cli

# In the order `ncclsim --help` lists them; `topo` last, with `render` added to it.
COMMANDS = (platform_cli, probe_cli, launch_cli, launch_clean_cli, report_cli, report_diff_cli, sweep_cli)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit 2, like every other ncclsim error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(catalog: GpuCatalog) -> argparse.ArgumentParser:
    parser = _Parser(prog="ncclsim", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"ncclsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(sub, catalog)
    topo_cli.register(sub, catalog, actions=(render_cli,))
    return parser


def main(argv: Optional[list[str]] = None, environ: Optional[Mapping[str, str]] = None,
         out: Optional[TextIO] = None) -> int:
    try:
        catalog = load_models()
        args = build_parser(catalog).parse_args(argv)
        return int(args.func(args, os.environ if environ is None else environ,
                             out or sys.stdout, catalog))
    except (NcclsimError, OSError) as e:
        print(f"ncclsim: error: {e}", file=sys.stderr)
        return 2
