"""`ncclsim diff A B`: what changed between two runs or two sweeps (ncclsim.report.diff)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Mapping, TextIO


def register(sub: Any) -> None:
    p = sub.add_parser("diff", help="what changed between two runs or two sweeps",
                       description="Compare two runs (run directories or run.json) or two sweeps "
                                   "(sweep.json or a sweep's directory, point by point): NCCL "
                                   "version, shape, channels, rings, trees, connections by "
                                   "transport, algorithm and protocol per collective and size, and "
                                   "the modelled timings side by side (--clock model). "
                                   "Exit status 0 when nothing changed, 1 otherwise.")
    p.add_argument("a", type=Path, metavar="A")
    p.add_argument("b", type=Path, metavar="B")
    p.add_argument("--json", action="store_true", help="print the differences as JSON")
    p.set_defaults(func=cmd_diff)


def cmd_diff(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    from ncclsim.report import diff  # the report's reader loads for this command only
    diffs = diff.diff_paths(args.a, args.b)
    if args.json:
        out.write(json.dumps(diff.to_json(diffs), indent=1) + "\n")
    else:
        out.write(diff.to_text(diffs))
    return 1 if any(d.differs for d in diffs) else 0
