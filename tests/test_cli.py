"""ncclsim.cli: the table of sub-commands and the parser built from it."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from ncclsim.cli import COMMANDS, build_parser


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_the_table_names_what_each_module_registers() -> None:
    every = {n for c in COMMANDS for n in c.names}
    assert _commands(build_parser()) == every
    for command in COMMANDS:
        for name in command.names:
            # a command line names one command: only its module is asked
            assert _commands(build_parser([name, "--help"])) == set(command.names), command.module
    assert _commands(build_parser(["--version"])) == every
    assert _commands(build_parser(["nosuch"])) == every  # argparse lists them in its error


def _loaded_by_help(command: str) -> set[str]:
    """The modules a fresh interpreter holds after `ncclsim COMMAND --help`."""
    code = ("import json, sys\nfrom ncclsim.cli import main\n"
            f"try:\n    main([{command!r}, '--help'])\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and f"usage: ncclsim {command}" in proc.stdout, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_a_command_line_imports_only_its_command() -> None:
    loaded = _loaded_by_help("clean")
    assert "ncclsim.launch.clean_cli" in loaded, loaded
    assert not {"ncclsim.sweep.cli", "ncclsim.topology.cli", "ncclsim.launch.cli"} & loaded, loaded
    # Only the commands that need the GPU models read them (`env`, `info`, `topo`, a launch's cluster).
    assert "ncclsim.platform.models" not in loaded, loaded
    assert "ncclsim.platform.models" in _loaded_by_help("info")


def test_the_probe_imports_only_what_a_rank_needs() -> None:
    """`ncclsim probe` starts once per rank of a launch: a rank's start must
    not import the GPU catalog, the platform's set-up, the NCCL wheels or a
    C parser (each costs every rank, hundreds at a time)."""
    loaded = _loaded_by_help("probe")
    assert {"ncclsim.probe.bindings", "ncclsim.probe.workload"} <= loaded, loaded
    heavy = {"ncclsim.platform.models", "ncclsim.platform.env", "ncclsim.nccl.wheels", "cffi", "pycparser",
             "dataclasses"}
    assert not heavy & loaded, heavy & loaded
