"""PyTorch jobs and GPU monitors on simulated hosts, unmodified: torch from
PyPI (and gpustat, nvitop) installed once into a cached environment beside
ncclsim's NCCL cache; the ranks run that environment's Python, on its NCCL.

Results are checked on the CPU (tests/workloads/torch_job.py); a
model's own kernels do not compute, its collectives do."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ncclsim.paths import default_config_dir

pytestmark = pytest.mark.e2e

WORKLOADS = Path(__file__).resolve().parent / "workloads"
TORCH = "torch==2.14.1"  # a CUDA 13 build, with nvidia-nccl-cu13 2.30.7
TOOLS = ("gpustat", "nvitop")


@pytest.fixture(scope="session")
def torch_env() -> Path:
    """bin/ of a virtual environment with torch and the GPU monitors, made once
    (minutes: torch and its NVIDIA wheels are ~3 GB) and kept in ncclsim's cache."""
    root = default_config_dir(os.environ) / f"torch-env-{TORCH.split('==')[1]}"
    ready = root / ".ready"
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / ".torch-env.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install, even from parallel test runs
        if not ready.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
            proc = subprocess.run([str(root / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                                   TORCH, "numpy", *TOOLS], capture_output=True, text=True)
            assert proc.returncode == 0, f"cannot install {TORCH}: {proc.stderr[-2000:]}"
            ready.touch()
    return root / "bin"


def _launch(run_cli, run: Path, *args: str, timeout: float = 600) -> dict:
    proc = run_cli("launch", "--run-dir", str(run), "--timeout", str(int(timeout)), *args, timeout=timeout + 60)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads((run / "run.json").read_text())


def _sizes(report: dict, collective: str) -> set[int]:
    return {t["bytes"] for t in report["tuning"] if t["collective"] == collective}


def _stdout(run: Path, processes: int) -> str:
    return "".join((run / "ranks" / str(r) / "stdout").read_text() for r in range(processes))


def _checked(out: str, world: int) -> list[int]:
    return sorted(int(r) for r in re.findall(rf"rank (\d+)/{world}: every collective checked", out))


def test_collectives_exact_then_ddp(run_cli, torch_env: Path, tmp_path: Path) -> None:
    """2 x 8, one process per GPU (env://), on torch's own NCCL (its wheel's cu13 build):
    every collective of torch.distributed checked; then a small transformer LM trained 3 steps
    with DDP (its gradient buckets: AllReduce); every process exits 0."""
    run = tmp_path / "job"
    report = _launch(run_cli, run, "--hosts", "2", "--gpus", "8", "--",
                     str(torch_env / "python"), str(WORKLOADS / "torch_job.py"), "--train", "ddp")
    assert (report["nranks"], report["nnodes"]) == (16, 2)
    assert {r["nccl_version"].split("+")[1][:6] for r in report["ranks"]} == {"cuda13"}, report["ranks"]
    out = _stdout(run, 16)
    assert _checked(out, 16) == list(range(16)), out[-3000:]
    assert all(f"rank {r}: ddp step 2 done" in out for r in range(16)), out[-3000:]
    assert any(size > 1 << 20 for size in _sizes(report, "AllReduce")), report["tuning"]


def test_fsdp_trains(run_cli, torch_env: Path, tmp_path: Path) -> None:
    """2 x 4: the same model fully sharded (FSDP): parameters gathered (AllGather), gradients
    scattered (ReduceScatter), 3 steps; every process exits 0."""
    run = tmp_path / "fsdp"
    report = _launch(run_cli, run, "--hosts", "2", "--gpus", "4", "--",
                     str(torch_env / "python"), str(WORKLOADS / "torch_job.py"), "--train", "fsdp", "--no-checks")
    assert (report["nranks"], report["nnodes"]) == (8, 2)
    out = _stdout(run, 8)
    assert all(f"rank {r}: fsdp step 2 done" in out for r in range(8)), out[-3000:]
    assert len(_sizes(report, "AllGather")) > 1 and len(_sizes(report, "ReduceScatter")) > 1, report["tuning"]


def test_collectives_exact_under_torchrun_per_host(run_cli, torch_env: Path, tmp_path: Path) -> None:
    """2 x 8, torchrun once per simulated host (PET_* from launch), eight workers each.
    torchrun's logs are the run's (it would make a /tmp/torchelastic_* per host and
    never remove it)."""
    run = tmp_path / "torchrun"
    temp_before = set(Path(tempfile.gettempdir()).glob("torchelastic_*"))
    report = _launch(run_cli, run, "--hosts", "2", "--gpus", "8", "--gpus-per-process", "8", "--",
                     str(torch_env / "torchrun"), str(WORKLOADS / "torch_job.py"))
    assert (report["nranks"], report["nnodes"]) == (16, 2)
    assert _checked(_stdout(run, 2), 16) == list(range(16))
    assert set(Path(tempfile.gettempdir()).glob("torchelastic_*")) <= temp_before
    assert all(list((run / "ranks" / str(r) / "torchrun").iterdir()) for r in range(2))


def test_gpu_monitors_see_the_ranks(ncclsim_exe: Path, clean_env: dict[str, str], torch_env: Path,
                                    tmp_path: Path) -> None:
    """gpustat and nvitop, run beside a launch on its host (`ncclsim env --run`), list
    the host's GPUs and the rank holding memory on each."""
    run, release = tmp_path / "run", tmp_path / "release"
    launch = subprocess.Popen([str(ncclsim_exe), "launch", "--hosts", "1", "--gpus", "2", "--run-dir", str(run),
                               "--", str(torch_env / "python"), str(WORKLOADS / "torch_hold.py"), str(release)],
                              env=clean_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = {}
        deadline = time.time() + 120
        while len(pids) < 2 and time.time() < deadline and launch.poll() is None:
            for r in range(2):
                out = run / "ranks" / str(r) / "stdout"
                m = re.search(r"in pid (\d+)", out.read_text()) if out.exists() else None
                if m:
                    pids[r] = int(m.group(1))
            time.sleep(0.2)
        assert len(pids) == 2, f"ranks did not start: {launch.poll()}"
        exports = subprocess.run([str(ncclsim_exe), "env", "--run", str(run)], env=clean_env,
                                 capture_output=True, text=True, check=True).stdout
        env = dict(clean_env)
        for line in exports.splitlines():
            words = shlex.split(line)
            if words[0] == "export":
                k, _, v = words[1].partition("=")
                env[k] = v
        stat = subprocess.run([str(torch_env / "gpustat"), "--json"], env=env, capture_output=True, text=True,
                              timeout=60)
        assert stat.returncode == 0, stat.stderr
        gpus = json.loads(stat.stdout)["gpus"]
        assert [g["name"] for g in gpus] == ["NVIDIA H100 80GB HBM3"] * 2  # the launch's host: --gpus 2
        for r, pid in pids.items():
            mine = [p for p in gpus[r]["processes"] if p["pid"] == pid]
            assert mine and mine[0]["gpu_memory_usage"] >= 256, gpus[r]["processes"]
        top = subprocess.run([str(torch_env / "nvitop"), "-1"], env=env, capture_output=True, text=True,
                             timeout=60)
        assert top.returncode == 0 and "H100 80GB HBM3" in top.stdout, top.stderr[-2000:]
        assert all(str(pid) in top.stdout for pid in pids.values()), top.stdout[-3000:]
    finally:
        release.touch()
        out, err = launch.communicate(timeout=120)
    assert launch.returncode == 0, err[-3000:]
