"""nccl_perf (tests/programs/nccl_perf.cu), our benchmark in the style of
nccl-tests' all_reduce_perf: built with nvcc against the NCCL wheel and the
mpich wheel, run unchanged under `ncclsim launch`, one MPI process per GPU.
With -c 1 every rank copies its results back and checks them on the host, so
a passing run means the simulated collectives moved and reduced the right
data, on one host and between hosts."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from ncclsim.paths import mpi_nvcc_flags, nccl_lib_dir

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("nvcc") is None,
                                 reason="nvcc (CUDA toolkit) is not installed: nccl_perf is not built")]

SOURCE = Path(__file__).parent / "programs" / "nccl_perf.cu"
MiB = 1 << 20



def build_nccl_perf(out: Path) -> Path:
    """nvcc with warnings as errors; NCCL is found at run time on LD_LIBRARY_PATH
    (launch puts the wheel's there), so no rpath ties the program to one NCCL."""
    nccl = nccl_lib_dir()
    exe = out / "nccl_perf"
    subprocess.run(["nvcc", "-arch=sm_90", "-O2", "-Xcompiler", "-Wall,-Wextra", "-Werror", "all-warnings",
                    "-o", str(exe), str(SOURCE), f"-I{nccl.parent / 'include'}", f"-L{nccl}", "-l:libnccl.so.2",
                    *mpi_nvcc_flags()], check=True, capture_output=True, text=True)
    return exe


@pytest.fixture(scope="module")
def nccl_perf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_nccl_perf(tmp_path_factory.mktemp("nccl_perf"))


@dataclass
class Row:
    size: int
    count: int
    redop: str
    root: int
    time_us: float
    algbw: float
    busbw: float
    wrong: Optional[int]  # None: not checked


ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+float\s+(sum|none)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+|N/A)$")


def _rows(out: str) -> list[Row]:
    rows = []
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            rows.append(Row(int(m[1]), int(m[2]), m[3], int(m[4]), float(m[5]), float(m[6]), float(m[7]),
                            None if m[8] == "N/A" else int(m[8])))
    return rows


@dataclass
class PerfRun:
    proc: subprocess.CompletedProcess[str]
    run: Path
    out: str  # rank 0's stdout: the table
    rows: list[Row]

    def explain(self) -> str:
        errs = sorted(self.run.glob("ranks/*/stderr"))
        tails = "".join(f"\n{e}: {e.read_text()[-500:]}" for e in errs[:3] if e.stat().st_size)
        return f"launch stderr:\n{self.proc.stderr[-2000:]}\nrank 0 stdout:\n{self.out[-2000:]}{tails}"


def _perf(run_cli, tmp_path: Path, exe: Path, hosts: int, gpus: int, *args: str, timeout: int = 300,
          env: Optional[dict[str, str]] = None) -> PerfRun:
    run = tmp_path / "run"
    # launch's own --timeout first: it names the ranks still running and cleans up.
    proc = run_cli("launch", "--run-dir", str(run), "--hosts", str(hosts), "--gpus", str(gpus),
                   "--timeout", str(timeout), "--", str(exe), *args, timeout=timeout + 120, env=env)
    stdout = run / "ranks" / "0" / "stdout"
    out = stdout.read_text() if stdout.exists() else ""
    return PerfRun(proc, run, out, _rows(out))


def _sweep(lo: int, hi: int, factor: int) -> list[int]:
    sizes = [lo]
    while sizes[-1] * factor <= hi:
        sizes.append(sizes[-1] * factor)
    return sizes


def _check_placement(out: str, hosts: int, gpus: int) -> None:
    """Every rank found its GPU from the hostnames: rank r on host r // gpus, device r % gpus."""
    assert f"{hosts * gpus} ranks on {hosts} host(s)" in out, out[:500]
    for r in range(hosts * gpus):
        assert re.search(rf"^#  rank +{r} host ncclsim-h{r // gpus} device {r % gpus} \[", out, re.M), (r, out[:3000])


def _check_correct(p: PerfRun, sizes: list[int]) -> None:
    assert p.proc.returncode == 0, p.explain()
    assert [r.size for r in p.rows] == sizes, p.explain()
    assert all(r.wrong == 0 for r in p.rows), p.explain()
    assert all(r.time_us > 0 for r in p.rows), p.out
    assert "# Out of bounds values : 0 OK" in p.out
    assert re.search(r"^# Avg bus bandwidth +: \d+\.\d+$", p.out, re.M), p.out
    launch = json.loads((p.run / "launch.json").read_text())
    assert [r["status"] for r in launch["ranks"]] == [0] * launch["processes"]


def test_one_host_allreduce_is_right(run_cli, tmp_path: Path, nccl_perf: Path) -> None:
    p = _perf(run_cli, tmp_path, nccl_perf, 1, 8, "-b", "8", "-e", "1M", "-f", "2", "-c", "1")
    sizes = _sweep(8, MiB, 2)
    _check_correct(p, sizes)
    _check_placement(p.out, 1, 8)
    for r in p.rows:
        assert (r.count, r.redop, r.root) == (r.size // 4, "sum", -1), r
        # busbw = algbw x 2(n-1)/n, each printed to 3 decimals
        assert abs(r.busbw - r.algbw * 2 * 7 / 8) <= 0.002, r


def test_two_hosts_allreduce_to_128m(run_cli, tmp_path: Path, nccl_perf: Path) -> None:
    # 16 ranks x 2 buffers x 128 MiB of simulated device memory (host memory):
    # the run peaks at about 7.3 GB of PSS in all.
    p = _perf(run_cli, tmp_path, nccl_perf, 2, 8, "-b", "8", "-e", "128M", "-f", "8", "-c", "1", timeout=1200)
    sizes = _sweep(8, 128 * MiB, 8)
    _check_correct(p, sizes)
    _check_placement(p.out, 2, 8)
    assert all(r.count == r.size // 4 for r in p.rows)
    report = json.loads((p.run / "run.json").read_text())
    # The data crossed the simulated network, and NCCL saw every size.
    assert report["nnodes"] == 2 and report["transports"]["inter_host"] == ["NET/ncclsim/GDRDMA"]
    seen = {t["bytes"] for t in report["tuning"] if t["collective"] == "AllReduce"}
    assert set(sizes) <= seen, sorted(set(sizes) - seen)


def test_two_hosts_alltoall_is_right(run_cli, tmp_path: Path, nccl_perf: Path) -> None:
    p = _perf(run_cli, tmp_path, nccl_perf, 2, 8, "-o", "alltoall", "-b", "1K", "-e", "1M", "-f", "4", "-c", "1",
              timeout=900)
    sizes = _sweep(1024, MiB, 4)
    _check_correct(p, sizes)
    for r in p.rows:  # count is per peer
        assert (r.count, r.redop, r.root) == (r.size // 4 // 16, "none", -1), r
        assert abs(r.busbw - r.algbw * 15 / 16) <= 0.002, r


@pytest.mark.parametrize("op,in_place", [
    ("allgather", False), ("allgather", True), ("reducescatter", False), ("reducescatter", True),
    ("broadcast", False), ("broadcast", True), ("reduce", False), ("alltoall", False), ("sendrecv", False),
    ("allreduce", True),
])
def test_one_host_every_operation_is_right(run_cli, tmp_path: Path, nccl_perf: Path, op: str, in_place: bool) -> None:
    """Root 3, so a root other than rank 0 is what broadcast and reduce use."""
    p = _perf(run_cli, tmp_path, nccl_perf, 1, 8, "-o", op, "-i", str(int(in_place)), "-r", "3",
              "-b", "8", "-e", "1M", "-f", "8", "-c", "1")
    chunked = op in ("allgather", "reducescatter", "alltoall")
    # Chunked operations take a multiple of 8 ranks x 4 bytes: 8 B rounds to 32 B.
    sizes = [max(s, 32) if chunked else s for s in _sweep(8, MiB, 8)]
    _check_correct(p, sizes)
    for r in p.rows:
        assert r.count == (r.size // 4 // 8 if chunked else r.size // 4), r
        assert r.root == (3 if op in ("broadcast", "reduce") else -1), r
        assert r.redop == ("sum" if op in ("allreduce", "reducescatter", "reduce") else "none"), r


@pytest.mark.parametrize("hosts,gpus,op,algo", [
    (1, 8, "allreduce", "NVLS"), (1, 8, "reducescatter", "NVLS"), (2, 4, "allreduce", "NVLSTree"),
])
def test_nvls_in_place_is_right(run_cli, tmp_path: Path, nccl_perf: Path, hosts: int, gpus: int, op: str,
                                algo: str) -> None:
    """In place, the buffer the kernel writes is the one its NVLS scatter
    steps of 4 KiB and more name instead of copying (each head reads the
    ranks' input where it is), and a multicast store writes straight into
    the outputs the gathers offered (else the gathers read the one copy it
    wrote): every result must still be the reduction of the inputs as they
    were."""
    p = _perf(run_cli, tmp_path, nccl_perf, hosts, gpus, "-o", op, "-i", "1", "-b", "1M", "-e", "16M", "-f", "4",
              "-c", "1", env={"NCCL_ALGO": algo})
    sizes = _sweep(MiB, 16 * MiB, 4)
    _check_correct(p, sizes)
    report = json.loads((p.run / "run.json").read_text())
    coll = {"allreduce": "AllReduce", "reducescatter": "ReduceScatter"}[op]
    used = {t["algorithm"] for t in report["tuning"] if t["collective"] == coll}
    assert used == {"NVLS" if algo == "NVLS" else "NVLS_TREE"}, (used, p.explain())


@pytest.mark.parametrize("algo,expected", [(None, {"RING", "TREE"}), ("NVLSTree", {"NVLS_TREE"})])
def test_new_communicators_are_right(run_cli, tmp_path: Path, nccl_perf: Path, algo: Optional[str],
                                     expected: set[str]) -> None:
    """Three communicators one after another in the same processes, each
    with new buffers: the emulation keeps each connection it set up across
    launches, and must set it up again once memory was freed (the new
    connections, buffers and multicast objects are often where the last
    round's were, in new memory). Every result of every round is checked."""
    p = _perf(run_cli, tmp_path, nccl_perf, 2, 4, "-b", "8", "-e", "4M", "-f", "8", "-n", "2", "-c", "1", "-R", "3",
              env={"NCCL_ALGO": algo} if algo else None)
    sizes = _sweep(8, 4 * MiB, 8)
    _check_correct(p, sizes * 3)
    assert "# round 3 of 3: a new communicator and new buffers" in p.out, p.out
    report = json.loads((p.run / "run.json").read_text())
    used = {t["algorithm"] for t in report["tuning"] if t["collective"] == "AllReduce"}
    assert used == expected, (used, p.explain())


def test_deliveries_go_on_for_many_communicators(run_cli, tmp_path: Path, nccl_perf: Path) -> None:
    """Twenty NVLS communicators one after another on 1 x 8: each gather
    offers its output on the host's delivery board for every collective
    (deliveries.h), and its entry goes back to the board when the gather is
    done. Entries kept for good filled the board after some 16 such
    communicators, and the later ones' gathers offered nothing (their steps
    went through the buffers: right, but slower)."""
    rounds, ops = 20, 2  # per round: one timed operation and the checked one
    trace = tmp_path / "trace"
    trace.mkdir()
    p = _perf(run_cli, tmp_path, nccl_perf, 1, 8, "-b", "1M", "-e", "1M", "-n", "1", "-w", "0", "-c", "1",
              "-R", str(rounds), env={"NCCL_ALGO": "NVLS", "NCCLSIM_TRACE": str(trace)})
    _check_correct(p, [MiB] * rounds)
    events = [json.loads(line)["args"] for f in trace.glob("*.jsonl") for line in f.read_text().splitlines()
              if '"nvls_delivered"' in line]
    offers: dict[str, int] = {}
    for e in events:  # who: "rank R channel C <kernel> (gather)", the same in every round
        offers[e["who"]] = offers.get(e["who"], 0) + 1
    assert len(offers) >= 8 and set(offers.values()) == {rounds * ops}, offers
    assert sum(e["delivered"] for e in events) >= 0.5 * sum(e["steps"] for e in events), events[-4:]


def test_the_check_finds_missing_results(run_cli, tmp_path: Path, nccl_perf: Path) -> None:
    """-x 1 leaves the operation out of the checked run: every value received
    is still the NaN the receive buffer was filled with, and must be counted."""
    p = _perf(run_cli, tmp_path, nccl_perf, 1, 2, "-b", "8", "-e", "64K", "-f", "8", "-c", "1", "-x", "1")
    assert p.proc.returncode == 1, p.explain()
    sizes = _sweep(8, 64 * 1024, 8)
    assert [r.size for r in p.rows] == sizes, p.explain()
    assert [r.wrong for r in p.rows] == [2 * s // 4 for s in sizes]  # both ranks, every float
    total = sum(2 * s // 4 for s in sizes)
    assert f"# Out of bounds values : {total} FAILED" in p.out
    assert re.search(rf"rank 0 \(host 0\) exited with status 1: nccl_perf: {total} wrong values over all ranks",
                     p.proc.stderr), p.proc.stderr
    detail = (p.run / "ranks" / "1" / "stderr").read_text()
    assert re.search(r"rank 1: allreduce 8 B: 2 of 2 values wrong; first at index 0: -?nan, expected \d+", detail), detail


@pytest.mark.parametrize("args,status,message", [
    # 100 GiB does not fit an 80 GB H100: the failing call is named.
    (["-e", "100G"], 3, r"nccl_perf: rank \d: \S+nccl_perf.cu:\d+: cudaMalloc\(.*\) failed: out of memory"),
    (["-o", "allsum"], 2, r"nccl_perf: unknown operation -o allsum"),
    (["-b", "1M", "-e", "1K"], 2, r"nccl_perf: sizes must satisfy 0 < MIN <= MAX"),
    (["-o", "sendrecv", "-i", "1"], 2, r"nccl_perf: -i 1: sendrecv has no in-place form"),
])
def test_failures_are_named(run_cli, tmp_path: Path, nccl_perf: Path, args: list[str], status: int,
                            message: str) -> None:
    p = _perf(run_cli, tmp_path, nccl_perf, 1, 2, *args, timeout=120)
    assert p.proc.returncode == status, p.explain()
    # Both ranks fail alike; launch names the one whose exit it saw first.
    assert re.search(rf"rank \d \(host 0\) exited with status {status}: {message}", p.proc.stderr), p.proc.stderr
