"""NVLS and NVLSTree (NVLink SHARP) on hosts whose NVSwitches offer multicast:
NCCL enables them itself, picks them where its tuning does, and every output
is checked by the probe. Forced runs cover every collective NCCL allows with
them, sizes with remainders, hosts where only some GPUs are heads, and the
NCCL releases of the cache."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Optional

import pytest

from ncclsim.rundir import RunDir

pytestmark = pytest.mark.e2e

NVLS_OPS = ("allreduce", "allgather", "reducescatter")
# Sizes that leave remainders: a last turn shorter than nHeads chunks, heads with nothing.
ODD_SIZES = [8, 4096, 1000 * 1000, (3 << 20) + 4 * 1234, 16 << 20]


def _probe(probe_run, run: Path, hosts: int, gpus: int, ops: tuple[str, ...], sizes: list[int],
           env: Optional[dict[str, str]] = None, preset: str = "dgx-h100", nccl: str = "installed",
           args: tuple[str, ...] = ()) -> dict:
    return probe_run(run, hosts, gpus, ops, sizes, env=env, nccl=nccl, args=("--preset", preset, *args))


def _algorithms(report: dict, collective: str) -> dict[int, str]:
    return {t["bytes"]: t["algorithm"] for t in report["tuning"] if t["collective"] == collective}


def test_nccl_picks_nvls_on_one_host(probe_run, leftovers, tmp_path: Path) -> None:
    """1 x 8 H100: NCCL builds NVLS channels, every GPU heads one share, and
    AllReduce from a few MiB up runs on NVLS by NCCL's own choice."""
    run = tmp_path / "run"
    report = _probe(probe_run, run, 1, 8, ("allreduce",), [65536, 16 << 20, 64 << 20])
    nvls = report["nvls"]
    assert nvls["supported"] is True and nvls["used"] is True and nvls["channels"] == 16, nvls
    assert nvls["heads"] == [[r] for r in range(8)]
    algos = _algorithms(report, "AllReduce")
    assert algos[16 << 20] == "NVLS" and algos[64 << 20] == "NVLS", algos
    assert algos[65536] != "NVLS", algos
    leftovers.assert_none(run)


def test_forced_nvls_on_one_host(probe_run, tmp_path: Path) -> None:
    """NCCL_ALGO=NVLS: AllReduce, AllGather and ReduceScatter through the
    multicast buffers, at sizes that leave remainders."""
    report = _probe(probe_run, tmp_path / "run", 1, 8, NVLS_OPS, ODD_SIZES, env={"NCCL_ALGO": "NVLS"})
    assert {t["algorithm"] for t in report["tuning"]} == {"NVLS"}, report["tuning"]
    assert {t["collective"] for t in report["tuning"]} == {"AllReduce", "AllGather", "ReduceScatter"}


def test_nccl_picks_nvls_tree_across_hosts(probe_run, leftovers, tmp_path: Path) -> None:
    """2 x 8 H100 (one NIC per GPU): NCCL logs a head per NIC on each host and
    picks NVLSTree for large AllReduce; forced NVLSTree at every size."""
    run = tmp_path / "run"
    report = _probe(probe_run, run, 2, 8, ("allreduce",), [65536, 16 << 20])
    assert report["nvls"]["heads"] == [[h, h + 8] for h in range(8)], report["nvls"]
    algos = _algorithms(report, "AllReduce")
    assert algos[16 << 20] == "NVLS_TREE", algos
    log = "".join(p.read_text() for p in RunDir(run).rank(0).directory.glob("nccl.*.log"))
    assert re.search(r"NVLS Head  7:  7 15", log), log[-2000:]
    leftovers.assert_none(run)
    forced = _probe(probe_run, tmp_path / "forced", 2, 4, ("allreduce",), ODD_SIZES,
                    env={"NCCL_ALGO": "NVLSTree"})
    assert {t["algorithm"] for t in forced["tuning"]} == {"NVLS_TREE"}, forced["tuning"]


@pytest.mark.parametrize("hosts,gpus,algo,name,ops", [
    (1, 8, "NVLS", "NVLS", ("allreduce", "reducescatter")),
    (2, 4, "NVLSTree", "NVLS_TREE", ("allreduce",)),  # NVLSTree is AllReduce's only
])
def test_nvls_with_a_process_per_host(probe_run, tmp_path: Path, hosts: int, gpus: int, algo: str,
                                      name: str, ops: tuple[str, ...]) -> None:
    """The GPUs of a host in one process: steps that name their data (the
    scatter's input, the one copy a multicast store wrote) are read at their
    address in the same process; every result is checked."""
    report = _probe(probe_run, tmp_path / "run", hosts, gpus, ops,
                    [1 << 20, (3 << 20) + 4 * 1234, 16 << 20], env={"NCCL_ALGO": algo},
                    args=("--gpus-per-process", str(gpus)))
    assert report["nranks"] == hosts * gpus
    assert {t["algorithm"] for t in report["tuning"] if t["collective"] == "AllReduce"} == {name}, report["tuning"]


def _deliveries(run_cli, run: Path, board: bool) -> tuple[int, int]:
    """1 x 4 forced NVLS, a process per GPU, AllReduce and AllGather checked
    by the probe: the gathers' steps, and how many of them a store wrote
    straight into the output (the trace's nvls_delivered events)."""
    trace = run / "trace"
    trace.mkdir(parents=True)
    unset = "" if board else "unset NCCLSIM_DELIVERY_BOARD; "  # the host's env file sets it for every rank
    rank = (f"{unset}exec {sys.executable} -m ncclsim.probe --ops allreduce,allgather "
            f"--sizes {1 << 20},{(3 << 20) + 4 * 1234} --iters 3")
    proc = run_cli("launch", "--hosts", "1", "--gpus", "4", "--run-dir", str(run / "run"), "--", "sh", "-c", rank,
                   env={"NCCL_ALGO": "NVLS", "NCCLSIM_TRACE": str(trace)}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = RunDir(run / "run").rank(0).stdout.read_text()
    assert len(re.findall(r" B  checked", out)) == 4, out[-3000:]
    events = [json.loads(line)["args"] for f in trace.glob("*.jsonl") for line in f.read_text().splitlines()
              if '"nvls_delivered"' in line]
    assert {e["who"].split()[1] for e in events} == {"0", "1", "2", "3"}, events[:4]  # every rank's gathers
    return sum(e["steps"] for e in events), sum(e["delivered"] for e in events)


def test_stores_deliver_into_the_gathers_outputs(run_cli, tmp_path: Path) -> None:
    """A head's multicast store writes each large step straight into the
    output of every GPU whose gather offered it on the host's delivery board,
    instead of into the GPU's buffer for the gather to copy (deliveries.h).
    With the board most steps arrive so (a store that comes before the
    gather's offer writes the buffer); without it in the ranks, a store sees
    only the offer of its own process's GPU, one of four. The results are
    right either way."""
    steps, delivered = _deliveries(run_cli, tmp_path / "with", board=True)
    assert steps > 0 and delivered >= 0.5 * steps, (steps, delivered)  # ~0.8: a store may be first
    steps_alone, delivered_alone = _deliveries(run_cli, tmp_path / "without", board=False)
    assert steps_alone == steps and 0 < delivered_alone <= steps / 4, (steps, delivered_alone)


def test_unwritten_inputs_are_read_as_zeros_across_processes(run_cli, leftovers, tmp_path: Path) -> None:
    """1 x 8 forced NVLS, a process per GPU: AllReduce of inputs nobody wrote
    (tests/workloads/unwritten_inputs.py) gives zeros on every rank. The
    heads read their peers' inputs through references, here to the zeros
    each process stands in with; read in place, each rank would fault in its
    own input and the parts of its peers' it reads (18 MiB per rank for
    4 MiB inputs), where mapping the team's outputs for their stores takes
    about one input's worth."""
    run = tmp_path / "run"
    proc = run_cli("launch", "--hosts", "1", "--gpus", "8", "--run-dir", str(run), "--",
                   sys.executable, str(Path(__file__).parent / "workloads" / "unwritten_inputs.py"),
                   env={"NCCL_ALGO": "NVLS"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = RunDir(run).rank(0).stdout.read_text()
    m = re.search(r"unwritten inputs of (\d+) KiB on 8 ranks: zeros; shared memory grew at most (-?\d+) KiB", out)
    assert m, out[-3000:]
    input_kib, grew_kib = int(m.group(1)), int(m.group(2))
    assert grew_kib < 2 * input_kib, f"a rank's shared memory grew {grew_kib} KiB reading {input_kib} KiB of holes"
    leftovers.assert_none(run)


def test_nvls_tree_with_fewer_heads_than_gpus(probe_run, tmp_path: Path) -> None:
    """hgx-h100-4nic: four NICs, so four heads per host (GPUs 0, 2, 4, 6, as on
    real 2 x 8 H100 logs); the other GPUs only scatter and gather."""
    report = _probe(probe_run, tmp_path / "run", 2, 8, ("allreduce",), ODD_SIZES,
                    env={"NCCL_ALGO": "NVLSTree"}, preset="hgx-h100-4nic")
    assert report["nvls"]["heads"] == [[0, 8], [2, 10], [4, 12], [6, 14]], report["nvls"]
    assert {t["algorithm"] for t in report["tuning"]} == {"NVLS_TREE"}, report["tuning"]


@pytest.mark.parametrize("preset", ["dgx-a100", "pcie-l40s"])
def test_no_nvls_without_multicast(probe_run, tmp_path: Path, preset: str) -> None:
    """As on the real machines: A100 NVSwitches and PCIe GPUs have no multicast."""
    report = _probe(probe_run, tmp_path / "run", 1, 4, ("allreduce",), [16 << 20], preset=preset)
    assert report["nvls"]["supported"] is False and report["nvls"]["used"] is False, report["nvls"]
    assert "NVLS" not in {t["algorithm"] for t in report["tuning"]}


def test_nvls_on_cached_releases(probe_run, tmp_path: Path, cached_release) -> None:
    """NVLS on one host and NVLSTree across two, forced, per release (three
    GPUs a host: 2.23-2.28 turn NVLS off with two or fewer)."""
    one = _probe(probe_run, tmp_path / "one", 1, 3, NVLS_OPS, [4096, 3 << 20],
                 env={**cached_release.env, "NCCL_ALGO": "NVLS"}, nccl=cached_release.spec)
    assert one["nccl_version"].startswith(cached_release.version)
    assert {t["algorithm"] for t in one["tuning"]} == {"NVLS"}, one["tuning"]
    two = _probe(probe_run, tmp_path / "two", 2, 3, ("allreduce",), [4096, 3 << 20],
                 env={**cached_release.env, "NCCL_ALGO": "NVLSTree"}, nccl=cached_release.spec)
    assert {t["algorithm"] for t in two["tuning"]} == {"NVLS_TREE"}, two["tuning"]
