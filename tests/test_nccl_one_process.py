"""Unmodified NCCL in one process over all 8 simulated GPUs: collectives with
the newest supported cu12 and cu13 wheels (the probe checks every result),
initialisation alone with releases the device emulation does not cover."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

OPS = "allreduce,allgather,broadcast,reducescatter,sendrecv"


@pytest.mark.e2e
@pytest.mark.parametrize("spec,version", [("installed", "2.30.7"), ("cu13:2.30.7", "2.30.7")])
def test_one_process_eight_gpus(spec: str, version: str, sim_env, nccl_build, tmp_path: Path) -> None:
    build = nccl_build(spec)
    log = tmp_path / "nccl.log"
    env = {**sim_env(gpus=8, nccl_lib=build.lib_dir), "NCCL_DEBUG": "INFO",
           "NCCL_DEBUG_FILE": str(log)}
    result = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ncclsim.probe", "--gpus-per-process", "8", "--ops", OPS,
         "--sizes", "1K,1M", "--json", str(result)],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(result.read_text())
    assert doc["nccl_version"] == version
    assert doc["nranks"] == 8 and doc["processes"] == 1
    assert [(o["operation"], o["size"]) for o in doc["operations"]] == [
        (op, size) for op in OPS.split(",") for size in (1024, 1 << 20)]
    text = log.read_text()
    ranks = set(re.findall(r"rank (\d) nranks 8 .*Init COMPLETE", text))
    assert ranks == {str(r) for r in range(8)}, text[-2000:]
    # GPUs of one process reach each other directly over the simulated NVLinks.
    transports = set(re.findall(r"via (\S+)", text))
    assert transports and all(t.startswith("P2P") for t in transports), transports
    assert "destroyed 8 communicator(s)" in proc.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("spec,version", [("2.21.5", "2.21.5")])
def test_releases_outside_the_table_initialise(spec: str, version: str, sim_env, nccl_build,
                                                 tmp_path: Path) -> None:
    """No kernel runs at init: rings, trees and connections of any release can be studied."""
    build = nccl_build(spec)
    result = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ncclsim.probe", "--gpus-per-process", "8", "--json", str(result)],
        env=sim_env(gpus=8, nccl_lib=build.lib_dir), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(result.read_text())["nccl_version"] == version
    assert "not supported" not in proc.stderr
