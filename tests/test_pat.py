"""PAT (AllGather and ReduceScatter with one GPU per host), emulated step for
step: NCCL's own choice at 4 x 1, forced on host counts that are not powers
of two, sizes from 8 B up, and the NCCL releases of the cache. Every output
is checked by the probe against what NCCL must compute."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest


pytestmark = pytest.mark.e2e

OPS = ("allgather", "reducescatter")


def _probe(probe_run, run: Path, hosts: int, sizes: list[int], ops: tuple[str, ...] = OPS,
           env: Optional[dict[str, str]] = None, nccl: str = "installed") -> dict:
    return probe_run(run, hosts, 1, ops, sizes, env=env, nccl=nccl)


def _pat_sizes(report: dict, collective: str) -> list[int]:
    return [t["bytes"] for t in report["tuning"] if t["collective"] == collective and t["algorithm"] == "PAT"]


def test_nccl_picks_pat_with_one_gpu_per_host(probe_run, leftovers, tmp_path: Path) -> None:
    report = _probe(probe_run, tmp_path / "run", 4, [1 << 20, 16 << 20])
    assert report["nnodes"] == 4 and report["nranks"] == 4
    for collective in ("AllGather", "ReduceScatter"):
        assert _pat_sizes(report, collective), f"NCCL did not choose PAT for {collective}: {report['tuning']}"
    assert report["pat"] == {"available": True, "used_by": ["AllGather", "ReduceScatter"], "why_not": ""}
    leftovers.assert_none(tmp_path / "run")


@pytest.mark.parametrize("hosts", [2, 3, 5, 8])
def test_forced_pat_on_any_host_count(probe_run, tmp_path: Path, hosts: int) -> None:
    """Small parts aggregate several peers per step, large ones take many
    chunks; host counts that are not powers of two skip steps."""
    sizes = [8, 1000, 4096, 65536, 3 << 20, 16 << 20]
    report = _probe(probe_run, tmp_path / "run", hosts, sizes, env={"NCCL_ALGO": "PAT"})
    assert {t["algorithm"] for t in report["tuning"]} == {"PAT"}, report["tuning"]


@pytest.mark.parametrize("hosts", [4, 8])
def test_allgather_8b_to_64mib(probe_run, tmp_path: Path, hosts: int) -> None:
    """An nccl-tests-style AllGather sweep: every size NCCL routes to Ring or PAT completes."""
    sizes = [8 << (2 * i) for i in range(13)]  # 8 B .. 128 MiB in steps of 4
    sizes = [s for s in sizes if s <= 64 << 20]
    _probe(probe_run, tmp_path / "run", hosts, sizes, ops=("allgather",))


def test_pat_on_cached_releases(probe_run, tmp_path: Path, cached_release) -> None:
    """Both PAT kernels: before 2.26 (one group of threads) and after."""
    report = _probe(probe_run, tmp_path / "run", 7, [8, 4096, 1 << 20, 16 << 20],
                    env={"NCCL_ALGO": "PAT", **cached_release.env}, nccl=cached_release.spec)
    assert report["nccl_version"].startswith(cached_release.version)
    assert _pat_sizes(report, "AllGather") and _pat_sizes(report, "ReduceScatter"), report["tuning"]
