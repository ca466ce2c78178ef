"""Eight processes with one GPU each on one simulated host, over real MPI:
connections between processes are set up by exchanging cuMem file
descriptors, and everything exits cleanly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_eight_processes(sim_env, mpiexec: Path, tmp_path: Path) -> None:
    env = {**sim_env(gpus=8), "NCCL_DEBUG": "INFO",
           "NCCL_DEBUG_FILE": str(tmp_path / "nccl.%p.log")}
    proc = subprocess.run(
        [str(mpiexec), "-n", "8", sys.executable, "-m", "ncclsim.probe",
         "--ops", "allreduce,allgather,broadcast,reducescatter,sendrecv", "--sizes", "4K,1M"],
        env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    logs = sorted(tmp_path.glob("nccl.*.log"))
    assert len(logs) == 8
    complete = set()
    transports: set[str] = set()
    for log in logs:
        text = log.read_text()
        complete.update(re.findall(r"rank (\d) nranks 8 .*Init COMPLETE", text))
        transports.update(re.findall(r" via (\S+)", text))
    assert complete == {str(r) for r in range(8)}
    # Between processes NCCL maps its peers' memory (cuMem fds or CUDA IPC),
    # rather than falling back to shared host memory.
    assert transports, "no connection was logged"
    assert transports <= {"P2P/CUMEM", "P2P/IPC", "P2P/CUMEM/CE", "P2P/IPC/CE"}, transports
    assert "destroyed 1 communicator(s)" in proc.stdout
