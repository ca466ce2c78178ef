"""`ncclsim clean [RUN_DIR]`: remove what a dead launch left on this machine
(a launch killed with SIGKILL together with the watchdog that otherwise
stops its ranks): the processes of its run, and the shared-memory segments
and MPI's temporary files nobody uses any more (cleanup.LEFTOVER_PLACES).

Without RUN_DIR: every run whose launch is gone. With RUN_DIR: that run's
processes, whether its launch lives or not."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Mapping, Optional, TextIO

from ncclsim import NcclsimError
from ncclsim.launch import cleanup
from ncclsim.rundir import RunDir


def register(sub: Any) -> None:
    p = sub.add_parser("clean", help="remove what a dead launch left behind (processes, shared memory, "
                                     "temporary files)",
                       description="Stop the processes of runs whose launch is gone (or of the run "
                                   "in RUN_DIR) on this machine and remove the shared-memory segments "
                                   "of NCCL, MPI and ncclsim and MPI's topology files in /tmp that no "
                                   "process uses.")
    p.add_argument("run_dir", type=Path, nargs="?", metavar="RUN_DIR",
                   help="the run to clean up (default: every run whose launch is gone)")
    p.set_defaults(func=cmd_clean)


def orphans(run_dir: Optional[Path]) -> list[int]:
    """Processes of the run in run_dir, or of every run whose launch is gone."""
    found = []
    for pid, env in cleanup.environments().items():
        if run_dir is not None:
            hit = env.get(cleanup.RUN_DIR) == str(run_dir)
        else:
            # A reused pid keeps a dead launch's run alive in our eyes: the safe way to be wrong.
            launch = env.get(cleanup.LAUNCH_PID, "")
            hit = not (launch.isdigit() and cleanup.running(int(launch)))
        if hit:
            found.append(pid)
    return found


def cmd_clean(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO) -> int:
    run_dir = None
    if args.run_dir is not None:
        run = RunDir(args.run_dir.resolve())
        if not run.root.is_dir():
            raise NcclsimError(f"{args.run_dir}: no such run directory")
        if not run.is_launch_run():
            raise NcclsimError(f"{args.run_dir}: not a run directory of `ncclsim launch` (no "
                               f"{run.rank_script.name} or {run.launch_json.name})")
        run_dir = run.root
    stopped = cleanup.kill_all(lambda: orphans(run_dir))
    removed = cleanup.remove_unused()
    what = f"run {run_dir}" if run_dir else "runs whose launch is gone"
    out.write(f"ncclsim clean: {what}: stopped {len(stopped)} process(es) on {os.uname().nodename}, "
              f"removed what no process used: {cleanup.describe(removed)}\n")
    return 0
