"""`ncclsim report RUN_DIR [--json]`: the run's report as text or JSON, saved as run.json."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Optional

from ncclsim import NcclsimError
from ncclsim.commands import add_command
from ncclsim.rundir import RUN_JSON, TIMELINE_JSON


def register(sub: Any) -> None:
    add_command(sub, "report", "summarise a run directory (rings, trees, transports, ...)",
                f"Read a run directory's NCCL logs and dumps; print what NCCL built and save it as "
                f"RUN_DIR/{RUN_JSON} (with --clock model, also the ranks' timelines merged as "
                f"RUN_DIR/{TIMELINE_JSON}).", add_arguments, lambda args, environ, out: execute(args))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory of a simulation")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
    p.add_argument("--no-write", action="store_true",
                   help=f"do not save the report as RUN_DIR/{RUN_JSON} (nor the merged timeline, "
                        f"RUN_DIR/{TIMELINE_JSON})")


def execute(args: argparse.Namespace) -> int:
    """Prints the report; NcclsimError (no such directory, no logs) is the caller's to turn into exit 2."""
    from ncclsim.report.build import build_report, write_run_json  # not loaded for other commands
    from ncclsim.report.summary import summary_text
    report = build_report(args.run_dir)
    if args.no_write:
        report = dataclasses.replace(report, timeline=None)  # the merged trace is written with run.json
    else:
        try:
            write_run_json(args.run_dir, report)
        except NcclsimError as e:
            # The report is still worth printing: a read-only run directory is common.
            print(f"ncclsim report: warning: {e} (--no-write skips it)", file=sys.stderr)
            report = dataclasses.replace(report, timeline=None)
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(summary_text(report))
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="ncclsim report", description=__doc__)
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return execute(args)
    except NcclsimError as e:
        print(f"ncclsim report: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
