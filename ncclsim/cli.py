"""The `ncclsim` command: simulated multi-host GPU platforms for unmodified NCCL.

Each sub-command lives with its package (its `cli` module's `register`);
this module only puts them together."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Mapping, NamedTuple, NoReturn, Optional, Sequence, TextIO

from ncclsim import NcclsimError, __version__


class Command(NamedTuple):
    names: tuple[str, ...]  # what it registers
    module: str  # whose `register(sub[, actions])` does
    actions: tuple[str, ...] = ()  # modules adding actions to it, from above its package


# In the order `ncclsim --help` lists them. A command line imports only its
# command's modules: all of them take longer to import than most commands
# take to run.
COMMANDS: tuple[Command, ...] = (
    Command(("env", "info", "platform"), "ncclsim.platform.cli"),
    Command(("probe",), "ncclsim.probe.cli"),
    Command(("launch",), "ncclsim.launch.cli"),
    Command(("clean",), "ncclsim.launch.clean_cli"),
    Command(("report",), "ncclsim.report.cli"),
    Command(("diff",), "ncclsim.report.diff_cli"),
    Command(("sweep",), "ncclsim.sweep.cli"),
    Command(("topo",), "ncclsim.topology.cli", actions=("ncclsim.render.cli",)),
)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit 2, like every other ncclsim error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _commands(argv: Optional[Sequence[str]]) -> list[Command]:
    """The command `argv` names, or every command (for help or an error)."""
    named = next((a for a in argv or () if not a.startswith("-")), None)
    return [c for c in COMMANDS if named in c.names] or list(COMMANDS)


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The parser of every command, or only of the one `argv` names."""
    parser = _Parser(prog="ncclsim", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"ncclsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in _commands(argv):
        register = importlib.import_module(command.module).register
        if command.actions:
            register(sub, actions=tuple(importlib.import_module(a) for a in command.actions))
        else:
            register(sub)
    return parser


def main(argv: Optional[list[str]] = None, environ: Optional[Mapping[str, str]] = None,
         out: Optional[TextIO] = None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser(argv).parse_args(argv)
        return int(args.func(args, os.environ if environ is None else environ, out or sys.stdout))
    except (NcclsimError, OSError) as e:
        print(f"ncclsim: error: {e}", file=sys.stderr)
        return 2
