"""After a run spread over several machines: stop what is left of it and
remove its shared memory on each of them (the launcher's own cleanup sees
only its machine). One process per machine, started by mpiexec like the
ranks were."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Mapping, Optional

from ncclsim.launch import cleanup
from ncclsim.launch.machines import Placement
from ncclsim.rundir import RunDir

CLEANUP_TIMEOUT = 60.0


def clean_machines(exe: Path, placement: Placement, mpiexec_args: tuple[str, ...], run: RunDir,
                   run_id: str, started: float, environ: Mapping[str, str]) -> Optional[str]:
    """None, or a line saying that cleaning up failed."""
    assert placement.hostfile is not None
    command = [str(exe), "-f", str(placement.hostfile), "-ppn", "1", *mpiexec_args,
               "-n", str(len(placement.machines)),
               sys.executable, "-m", "ncclsim.launch.cleanup", run_id, f"{started:.3f}"]
    # Without the run's id in its environment, or the cleanup would stop itself.
    env = {k: v for k, v in environ.items() if k != cleanup.RUN_ID}
    log = run.cleanup_log
    try:
        with open(log, "wb") as f:
            done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, stdout=f,
                                  stderr=subprocess.STDOUT, timeout=CLEANUP_TIMEOUT)
        failed = done.returncode != 0
    except subprocess.TimeoutExpired:
        failed = True
    if not failed:
        return None
    return (f"ncclsim: cleaning up on the machines of {placement.hostfile} failed; processes, "
            f"shared memory or temporary files of run {run_id} may be left there; see {log}")
