"""CollNet (in-network reduction): with `launch --collnet` the simulated
NICs' fabric reduces in its switches (what SHARP reduces: sum, max, min),
NCCL (NCCL_COLLNET_ENABLE=1) connects through the net plugin's CollNet and
uses it where its tuning picks it: AllReduce (with NVLS on H100: NVLS across
hosts through CollNet; without: CollNet Chain or Direct), AllGather and
ReduceScatter (CollNet Direct, or NVLS across hosts, through the plugin's
allgather and reducescatter). Forced algorithms are checked at sizes with
remainders, on several host counts and releases. Every output is checked by
the probe."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest


pytestmark = pytest.mark.e2e

SIZES = [8, 4096, 1000 * 1000, (3 << 20) + 4 * 1234, 16 << 20]
FEW_SIZES = [8, 1000 * 1000, (3 << 20) + 4 * 1234]  # still windows that end inside a host's part


def _probe(probe_run, run: Path, hosts: int, gpus: int, sizes: list[int], env: Optional[dict[str, str]] = None,
           collnet: bool = True, nccl: str = "installed", ops: tuple[str, ...] = ("allreduce",),
           redop: str = "sum") -> dict:
    return probe_run(run, hosts, gpus, ops, sizes, env={"NCCL_COLLNET_ENABLE": "1", **(env or {})},
                     nccl=nccl, args=("--collnet",) if collnet else (), probe_args=("--redop", redop))


def _algorithms(report: dict, collective: str = "AllReduce") -> dict[int, str]:
    return {t["bytes"]: t["algorithm"] for t in report["tuning"] if t["collective"] == collective}


GATHER_SCATTER = ("allgather", "reducescatter")


def test_nccl_picks_collnet(probe_run, leftovers, tmp_path: Path) -> None:
    """2 x 8 H100 on a fabric that reduces: from 1 MiB NCCL runs AllReduce as
    NVLS across the hosts through CollNet, AllGather and ReduceScatter of 1 MiB
    (64 KiB per rank) as CollNet Direct; with NVLS off, on 2 x 4, AllReduce as
    CollNet Chain."""
    run = tmp_path / "run"
    report = _probe(probe_run, run, 2, 8, [4096, 1 << 20, 16 << 20], ops=("allreduce",) + GATHER_SCATTER)
    assert report["collnet"]["supported"] is True and report["collnet"]["used"] is True, report["collnet"]
    assert report["transports"]["counts"].get("COLLNET/ncclsim/GDRDMA"), report["transports"]
    algos = _algorithms(report)
    assert algos[1 << 20] == algos[16 << 20] == "NVLS", algos
    for collective in ("AllGather", "ReduceScatter"):
        assert _algorithms(report, collective)[1 << 20] == "COLLNET_DIRECT", report["tuning"]
    leftovers.assert_none(run)
    no_nvls = _probe(probe_run, tmp_path / "no-nvls", 2, 4, [4096, 1 << 20, 16 << 20],
                     env={"NCCL_NVLS_ENABLE": "0"})
    algos = _algorithms(no_nvls)
    assert algos[1 << 20] == algos[16 << 20] == "COLLNET_CHAIN", algos


@pytest.mark.parametrize("algo, hosts", [("CollNetChain", 2), ("CollNetDirect", 2), ("CollNetChain", 3),
                                         ("CollNetDirect", 3)])
def test_forced_collnet(probe_run, tmp_path: Path, algo: str, hosts: int) -> None:
    report = _probe(probe_run, tmp_path / "run", hosts, 2, SIZES, env={"NCCL_ALGO": algo})
    want = "COLLNET_CHAIN" if algo == "CollNetChain" else "COLLNET_DIRECT"
    assert set(_algorithms(report).values()) == {want}, report["tuning"]


@pytest.mark.parametrize("algo, hosts, gpus", [("CollNetDirect", 3, 3), ("NVLS", 3, 2)])
def test_forced_collnet_allgather_reducescatter(probe_run, tmp_path: Path, algo: str, hosts: int, gpus: int) -> None:
    """Windows that end inside a host's part and span hosts (3 hosts, odd
    sizes): CollNet Direct with NVLS off, and NVLS across hosts, both through
    the plugin's allgather and reducescatter."""
    env = {"NCCL_ALGO": algo, **({"NCCL_NVLS_ENABLE": "0"} if algo == "CollNetDirect" else {})}
    report = _probe(probe_run, tmp_path / "run", hosts, gpus, FEW_SIZES, env=env, ops=GATHER_SCATTER)
    want = "COLLNET_DIRECT" if algo == "CollNetDirect" else "NVLS"
    for collective in ("AllGather", "ReduceScatter"):
        assert set(_algorithms(report, collective).values()) == {want}, report["tuning"]


def test_collnet_max_and_min(probe_run, tmp_path: Path) -> None:
    """The switch reduces max and min, as SHARP does: NCCL picks CollNet Chain
    for a 1 MiB maximum (NVLS off); a minimum on CollNet Direct (forced),
    AllReduce and ReduceScatter, at sizes with remainders."""
    report = _probe(probe_run, tmp_path / "max", 3, 2, [1 << 20], env={"NCCL_NVLS_ENABLE": "0"}, redop="max")
    assert _algorithms(report)[1 << 20] == "COLLNET_CHAIN", report["tuning"]
    report = _probe(probe_run, tmp_path / "min", 3, 3, FEW_SIZES,
                    env={"NCCL_NVLS_ENABLE": "0", "NCCL_ALGO": "CollNetDirect"}, ops=("allreduce", "reducescatter"),
                    redop="min")
    for collective in ("AllReduce", "ReduceScatter"):
        assert set(_algorithms(report, collective).values()) == {"COLLNET_DIRECT"}, report["tuning"]


def test_no_collnet_unless_the_fabric_has_it(probe_run, tmp_path: Path) -> None:
    report = _probe(probe_run, tmp_path / "run", 2, 2, [1 << 20], collnet=False)
    assert report["collnet"]["supported"] is False and report["collnet"]["used"] is False, report["collnet"]


@pytest.mark.releases("cu12:2.23.4", "cu12:2.26.2", "cu13:2.32.3")
def test_collnet_on_cached_releases(probe_run, tmp_path: Path, cached_release) -> None:
    """The oldest release, the first that loads CollNet v6..v10, the newest:
    NVLS through CollNet and CollNet Direct in one run (NCCL_ALGO lists both),
    AllGather and ReduceScatter too (which read the communicator's rail
    table, at its place in each release's layout)."""
    env = {**cached_release.env, "NCCL_ALGO": "NVLS,CollNetDirect"}
    report = _probe(probe_run, tmp_path / "run", 2, 3, [4096, 3 << 20], env=env, nccl=cached_release.spec,
                    ops=("allreduce",) + GATHER_SCATTER)
    assert report["nccl_version"].startswith(cached_release.version)
    for collective in ("AllReduce", "AllGather", "ReduceScatter"):
        algos = set(_algorithms(report, collective).values())
        assert algos and algos <= {"NVLS", "COLLNET_DIRECT"}, report["tuning"]
