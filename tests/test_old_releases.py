"""NCCL releases before 2.23 (2.18-2.22), whose kernels ncclsim does not play:
on 2 x 8 they initialise, search the topology, connect across hosts through
the net plugin and destroy; a collective fails with one clear line and an
error NCCL returns to the program, every rank exits 1, none crashes.

Each release runs when ncclsim's cache holds it (`launch --nccl 2.18.3`
fetches it once), as the other per-release tests do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ncclsim.rundir import RunDir

OLD_RELEASES = ("cu12:2.18.3", "cu12:2.19.3", "cu12:2.20.5", "cu12:2.21.5", "cu12:2.22.3")


@pytest.mark.e2e
@pytest.mark.releases(*OLD_RELEASES)
def test_init_and_destroy_on_two_hosts(run_cli, ncclsim_exe: Path, tmp_path: Path, cached_release) -> None:
    run = tmp_path / "run"
    proc = run_cli("launch", "--nccl", cached_release.spec, "--hosts", "2", "--gpus", "8", "--run-dir", str(run),
                   "--timeout", "300", "--", str(ncclsim_exe), "probe",  # no operation: init and destroy
                   # connect at init (2.22 would wait for a collective); NVLS's buffers, which
                   # only slow the connect down, are not what this checks
                   env={**cached_release.env, "NCCL_RUNTIME_CONNECT": "0", "NCCL_NVLS_ENABLE": "0"}, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(RunDir(run).run_json.read_text())
    assert report["nccl_version"].startswith(cached_release.version)
    assert (report["nranks"], report["nnodes"]) == (16, 2)
    assert all(r["init_complete"] for r in report["ranks"]) and len(report["ranks"]) == 16
    assert report["transports"]["inter_host"] and all(
        t.startswith("NET/ncclsim") for t in report["transports"]["inter_host"]), report["transports"]
    assert "destroyed 1 communicator(s)" in RunDir(run).rank(0).stdout.read_text()


@pytest.mark.e2e
@pytest.mark.releases("cu12:2.18.3", "cu12:2.22.3")  # kernels named ncclKernel_* / ncclDevKernel_*
def test_a_collective_fails_cleanly(run_cli, ncclsim_exe: Path, tmp_path: Path, cached_release) -> None:
    run = tmp_path / "run"
    proc = run_cli("launch", "--nccl", cached_release.spec, "--hosts", "2", "--gpus", "2", "--run-dir", str(run),
                   "--timeout", "300", "--", str(ncclsim_exe), "probe", "--ops", "allreduce", "--sizes", "1M",
                   env=cached_release.env, timeout=400)
    assert proc.returncode == 1, proc.stderr[-3000:]
    statuses = [RunDir(run).rank(r).status() for r in range(4)]
    assert statuses == [1, 1, 1, 1], statuses  # no SIGSEGV (139) after the failure
    for r in range(4):
        err = RunDir(run).rank(r).stderr.read_text()
        lines = [line for line in err.splitlines() if "is not supported by ncclsim's device emulation" in line]
        assert len(lines) == 1 and f"NCCL {cached_release.version} " in lines[0], err[-2000:]
        assert "ncclGroupEnd (allreduce) failed" in err, err[-2000:]
