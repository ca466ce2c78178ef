"""CollNet (in-network reduction): with `launch --collnet` the simulated
NICs' fabric reduces in its switches, NCCL (NCCL_COLLNET_ENABLE=1) connects
through the net plugin's CollNet and uses it for AllReduce where its tuning
picks it (with NVLS on H100: NVLS across hosts through CollNet; without:
CollNet Direct); forced Chain and Direct are checked at sizes with
remainders, on several host counts and releases. Every output is checked by
the probe."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import pytest

from ncclsim.nccl.wheels import cache_root
from ncclsim.rundir import RunDir

pytestmark = pytest.mark.e2e

SIZES = [8, 4096, 1000 * 1000, (3 << 20) + 4 * 1234, 16 << 20]


def _probe(run_cli, ncclsim_exe: Path, run: Path, hosts: int, gpus: int, sizes: list[int],
           env: Optional[dict[str, str]] = None, collnet: bool = True, nccl: str = "installed") -> dict:
    proc = run_cli("launch", "--run-dir", str(run), "--nccl", nccl, "--hosts", str(hosts), "--gpus", str(gpus),
                   *(["--collnet"] if collnet else []), "--timeout", "600", "--", str(ncclsim_exe), "probe",
                   "--ops", "allreduce", "--sizes", ",".join(map(str, sizes)),
                   env={"NCCL_COLLNET_ENABLE": "1", **(env or {})}, timeout=700)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = RunDir(run).rank(0).stdout.read_text()
    for size in sizes:
        assert re.search(rf"allreduce +{size} B  checked", out), f"allreduce {size} B not checked:\n{out[-3000:]}"
    return json.loads(RunDir(run).run_json.read_text())


def _algorithms(report: dict) -> dict[int, str]:
    return {t["bytes"]: t["algorithm"] for t in report["tuning"] if t["collective"] == "AllReduce"}


def test_nccl_picks_collnet(run_cli, ncclsim_exe: Path, leftovers, tmp_path: Path) -> None:
    """2 x 8 H100 on a fabric that reduces: from 1 MiB NCCL runs AllReduce as
    NVLS across the hosts through CollNet; with NVLS off, as CollNet Direct."""
    run = tmp_path / "run"
    report = _probe(run_cli, ncclsim_exe, run, 2, 8, [4096, 1 << 20, 16 << 20])
    assert report["collnet"]["supported"] is True and report["collnet"]["used"] is True, report["collnet"]
    assert report["transports"]["counts"].get("COLLNET/ncclsim/GDRDMA"), report["transports"]
    algos = _algorithms(report)
    assert algos[1 << 20] == algos[16 << 20] == "NVLS", algos
    leftovers.assert_none(run)
    no_nvls = _probe(run_cli, ncclsim_exe, tmp_path / "no-nvls", 2, 8, [4096, 1 << 20, 16 << 20],
                     env={"NCCL_NVLS_ENABLE": "0"})
    algos = _algorithms(no_nvls)
    assert algos[1 << 20] == algos[16 << 20] == "COLLNET_DIRECT", algos


@pytest.mark.parametrize("algo, hosts", [("CollNetChain", 2), ("CollNetDirect", 2), ("CollNetChain", 3),
                                         ("CollNetDirect", 3)])
def test_forced_collnet(run_cli, ncclsim_exe: Path, tmp_path: Path, algo: str, hosts: int) -> None:
    report = _probe(run_cli, ncclsim_exe, tmp_path / "run", hosts, 2, SIZES, env={"NCCL_ALGO": algo})
    want = "COLLNET_CHAIN" if algo == "CollNetChain" else "COLLNET_DIRECT"
    assert set(_algorithms(report).values()) == {want}, report["tuning"]


def test_no_collnet_unless_the_fabric_has_it(run_cli, ncclsim_exe: Path, tmp_path: Path) -> None:
    report = _probe(run_cli, ncclsim_exe, tmp_path / "run", 2, 2, [1 << 20], collnet=False)
    assert report["collnet"]["supported"] is False and report["collnet"]["used"] is False, report["collnet"]


def _cached(flavour: str, version: str) -> bool:
    return (cache_root() / f"{flavour}-{version}" / "lib" / "libnccl.so.2").exists()


@pytest.mark.parametrize("spec", [
    pytest.param(spec, marks=pytest.mark.skipif(not _cached(*spec.split(":")), reason=f"{spec} is not in the cache"))
    for spec in ("cu12:2.23.4", "cu12:2.26.2", "cu13:2.32.3")])
def test_collnet_on_cached_releases(run_cli, ncclsim_exe: Path, tmp_path: Path, spec: str) -> None:
    """The oldest release, the first that loads CollNet v6..v10, the newest:
    NVLS through CollNet and CollNet Direct in one run (NCCL_ALGO lists both)."""
    env = {"XDG_CACHE_HOME": str(cache_root().parent.parent), "NCCL_ALGO": "NVLS,CollNetDirect"}
    report = _probe(run_cli, ncclsim_exe, tmp_path / "run", 2, 4, [4096, 3 << 20], env=env, nccl=spec)
    assert report["nccl_version"].startswith(spec.split(":")[1])
    assert set(_algorithms(report).values()) <= {"NVLS", "COLLNET_DIRECT"}, report["tuning"]
