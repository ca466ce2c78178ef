"""PAT (AllGather and ReduceScatter with one GPU per host), emulated step for
step: NCCL's own choice at 4 x 1, forced on host counts that are not powers
of two, sizes from 8 B up, and the NCCL releases of the cache. Every output
is checked by the probe against what NCCL must compute."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import pytest

from ncclsim.nccl.wheels import cache_root
from ncclsim.rundir import RunDir

pytestmark = pytest.mark.e2e

OPS = ("allgather", "reducescatter")


def _probe(run_cli, ncclsim_exe: Path, run: Path, hosts: int, sizes: list[int], ops: tuple[str, ...] = OPS,
           env: Optional[dict[str, str]] = None, nccl: str = "installed") -> dict:
    proc = run_cli("launch", "--run-dir", str(run), "--nccl", nccl, "--hosts", str(hosts), "--gpus", "1",
                   "--timeout", "600", "--", str(ncclsim_exe), "probe", "--ops", ",".join(ops),
                   "--sizes", ",".join(map(str, sizes)), env=env, timeout=700)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = RunDir(run).rank(0).stdout.read_text()
    for op in ops:
        for size in sizes:
            assert re.search(rf"{op} +{size} B  checked", out), f"{op} {size} B not checked:\n{out[-3000:]}"
    return json.loads(RunDir(run).run_json.read_text())


def _pat_sizes(report: dict, collective: str) -> list[int]:
    return [t["bytes"] for t in report["tuning"] if t["collective"] == collective and t["algorithm"] == "PAT"]


def test_nccl_picks_pat_with_one_gpu_per_host(run_cli, ncclsim_exe: Path, leftovers, tmp_path: Path) -> None:
    report = _probe(run_cli, ncclsim_exe, tmp_path / "run", 4, [1 << 20, 16 << 20])
    assert report["nnodes"] == 4 and report["nranks"] == 4
    for collective in ("AllGather", "ReduceScatter"):
        assert _pat_sizes(report, collective), f"NCCL did not choose PAT for {collective}: {report['tuning']}"
    assert report["pat"] == {"available": True, "used_by": ["AllGather", "ReduceScatter"], "why_not": ""}
    leftovers.assert_none(tmp_path / "run")


@pytest.mark.parametrize("hosts", [2, 3, 5, 8])
def test_forced_pat_on_any_host_count(run_cli, ncclsim_exe: Path, tmp_path: Path, hosts: int) -> None:
    """Small parts aggregate several peers per step, large ones take many
    chunks; host counts that are not powers of two skip steps."""
    sizes = [8, 1000, 4096, 65536, 3 << 20, 16 << 20]
    report = _probe(run_cli, ncclsim_exe, tmp_path / "run", hosts, sizes, env={"NCCL_ALGO": "PAT"})
    assert {t["algorithm"] for t in report["tuning"]} == {"PAT"}, report["tuning"]


@pytest.mark.parametrize("hosts", [4, 8])
def test_allgather_8b_to_64mib(run_cli, ncclsim_exe: Path, tmp_path: Path, hosts: int) -> None:
    """An nccl-tests-style AllGather sweep: every size NCCL routes to Ring or PAT completes."""
    sizes = [8 << (2 * i) for i in range(13)]  # 8 B .. 128 MiB in steps of 4
    sizes = [s for s in sizes if s <= 64 << 20]
    _probe(run_cli, ncclsim_exe, tmp_path / "run", hosts, sizes, ops=("allgather",))


def _cached(flavour: str, version: str) -> bool:
    return (cache_root() / f"{flavour}-{version}" / "lib" / "libnccl.so.2").exists()


@pytest.mark.parametrize("spec", [
    pytest.param(spec, marks=pytest.mark.skipif(not _cached(*spec.split(":")), reason=f"{spec} is not in the cache"))
    for spec in ("cu12:2.23.4", "cu12:2.24.3", "cu12:2.25.1", "cu12:2.26.2", "cu12:2.27.7", "cu12:2.29.2",
                 "cu12:2.32.3", "cu13:2.27.7", "cu13:2.30.7", "cu13:2.32.3")])
def test_pat_on_cached_releases(run_cli, ncclsim_exe: Path, tmp_path: Path, spec: str) -> None:
    """Both PAT kernels: before 2.26 (one group of threads) and after."""
    xdg = cache_root().parent.parent  # the cache that holds the release, not the test's own
    report = _probe(run_cli, ncclsim_exe, tmp_path / "run", 7, [8, 4096, 1 << 20, 16 << 20],
                    env={"NCCL_ALGO": "PAT", "XDG_CACHE_HOME": str(xdg)}, nccl=spec)
    assert report["nccl_version"].startswith(spec.split(":")[1])
    assert _pat_sizes(report, "AllGather") and _pat_sizes(report, "ReduceScatter"), report["tuning"]
