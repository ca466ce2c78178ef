"""`ncclsim launch`: simulated hosts over real MPI, with real NCCL."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

from ncclsim.launch.cleanup import SHM_PREFIXES
from ncclsim.launch.environment import LOCAL_SOCKETS, SHARED_PAGES, rank_environment
from ncclsim.meminfo import meminfo, room
from ncclsim.paths import cudart_lib_dir, nccl_lib_dir, nvidia_package_dirs
from ncclsim.rundir import RunDir

PROGRAMS = Path(__file__).parent / "programs"


def _launch(run_cli, run_dir: Path, *args: str, timeout: int = 300,
            env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
    return run_cli("launch", "--run-dir", str(run_dir), *args, timeout=timeout, env=env)


def _report(run_cli, run_dir: Path) -> dict:
    proc = run_cli("report", str(run_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _check_cycle(order: list[int], n: int) -> None:
    assert sorted(order) == list(range(n)), order


@pytest.mark.e2e
def test_two_hosts_of_eight(run_cli, leftovers, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _launch(run_cli, run, "--hosts", "2", "--gpus", "8")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "16/16 ranks initialised" in proc.stderr
    launch = json.loads((run / "launch.json").read_text())
    assert launch["processes"] == launch["nccl_ranks"] == launch["initialised"] == 16
    assert all(r["status"] == 0 for r in launch["ranks"])
    report = _report(run_cli, run)
    assert report["nranks"] == 16 and report["nnodes"] == 2 and report["local_ranks"] == 8
    assert report["rings"], "no rings in the report"
    for order in report["rings"].values():
        _check_cycle(order, 16)
    for tree in report["trees"].values():
        assert sorted(int(r) for r in tree) == list(range(16))
    # NCCL's own view of host 0: the preset's 8 GPUs with 18 NVLinks each, 8 NICs at 400 Gb/s ...
    topo = report["topology"]
    assert [g["dev"] for g in topo["gpus"]] == list(range(8)) and topo["nvlinks"] == 8 * 18
    assert [(n["name"], n["speed"]) for n in topo["nics"]] == [(f"mlx5_{i}", 400000) for i in range(8)]
    _check_nic_beside_gpu(run / "topo-dump.xml")
    # ... and between hosts each GPU uses the NIC beside it, with GPU Direct RDMA.
    net = [c for c in report["connections"] if c["transport"].startswith("NET/")]
    assert net and {c["transport"] for c in net} == {"NET/ncclsim/GDRDMA"}
    for c in net:
        assert int(c["via"].split("/")[2]) == c["from"] % 8 == c["to"] % 8, c
    # The report says the same from the hosts' topology graph: the NIC each rank
    # sends by is the one nearest its GPU (on the GPU's PCI switch, 2 hops).
    nics = report["nics"]
    assert nics["topology"] == ["hosts/h0/topo.xml", "hosts/h1/topo.xml"]
    for r in nics["ranks"]:
        nic = f"h{r['rank'] // 8}/nic{r['rank'] % 8}"
        assert r["gpu"] == f"h{r['rank'] // 8}/gpu{r['rank'] % 8}"
        assert r["nearest"]["nic"] == nic and r["nearest"]["hops"] == 2
        assert [(u["nic"], u["nearest"]) for u in r["used"]] in ([], [(nic, True)]), r
    assert {r["rank"] for r in nics["ranks"] if r["used"]} == {c["from"] for c in net}
    check = next(c for c in report["checks"] if c["name"] == "inter-host connections leave by the GPU's nearest NIC")
    assert check["ok"], check
    assert report["transports"]["intra_host"] == ["P2P/CUMEM"]
    leftovers.assert_none(run)


def _check_nic_beside_gpu(dump: Path) -> None:
    """In NCCL's topology dump, GPU i and NIC mlx5_i share a PCI switch."""
    from lxml import etree
    root = etree.parse(str(dump)).getroot()
    for gpu in root.iter("gpu"):
        switch = gpu.getparent().getparent()
        nets = [n.get("name") for n in switch.iter("net")]
        assert nets == [f"mlx5_{gpu.get('dev')}"], (gpu.get("dev"), nets)


@pytest.mark.e2e
def test_one_process_per_host(run_cli, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _launch(run_cli, run, "--hosts", "2", "--gpus", "8", "--gpus-per-process", "8")
    assert proc.returncode == 0, proc.stderr[-3000:]
    launch = json.loads((run / "launch.json").read_text())
    assert launch["processes"] == 2 and launch["nccl_ranks"] == 16
    report = _report(run_cli, run)
    assert report["nranks"] == 16 and report["nnodes"] == 2
    for order in report["rings"].values():
        _check_cycle(order, 16)


@pytest.mark.e2e
def test_the_probe_drives_the_gpus_launch_gives_each_process(run_cli, ncclsim_exe: Path, tmp_path: Path) -> None:
    """`launch --gpus-per-process 2 -- ncclsim probe` without the probe's own
    flag: each process drives its 2 GPUs (4 ranks), not one. The probe's CPU
    time of an operation is the processes' (all their threads) while it ran:
    some, and no more than the machine's CPUs had."""
    run = tmp_path / "run"
    out = tmp_path / "probe.json"
    proc = _launch(run_cli, run, "--hosts", "2", "--gpus", "2", "--gpus-per-process", "2", "--",
                   str(ncclsim_exe), "probe", "--ops", "allreduce", "--sizes", "8", "--iters", "200",
                   "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["nranks"] == 4 and result["processes"] == 2, result
    op = result["operations"][0]
    assert op["operation"] == "allreduce", result
    assert 0 < op["cpu_seconds"] <= op["seconds"] * (os.cpu_count() or 1) + 0.05, op


@pytest.mark.e2e
def test_the_probe_leaves_out_sizes_it_has_no_memory_for(run_cli, ncclsim_exe: Path, tmp_path: Path) -> None:
    """--min-free: once less than that much memory is available (here always),
    every process leaves out the sizes after the first two, and says so."""
    run = tmp_path / "run"
    out = tmp_path / "probe.json"
    proc = _launch(run_cli, run, "--hosts", "2", "--gpus", "2", "--", str(ncclsim_exe), "probe", "--ops",
                   "allreduce", "--sizes", "8,64K,1M,4M", "--min-free", "1000T", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [o["size"] for o in result["operations"]] == [8, 65536], result
    assert result["left_out"] == [1 << 20, 4 << 20], result
    assert re.search(r"ncclsim probe: sizes from 1048576 B left out: [\d.]+ GB of memory and swap available, "
                     r"less than --min-free 1099511.6 GB", proc.stdout), proc.stdout
    assert "Checks: " in proc.stdout and "FAILED" not in proc.stdout, proc.stdout


@pytest.mark.e2e
def test_user_mpi_program_picks_gpu_by_hostname(run_cli, tmp_path: Path) -> None:
    exe = tmp_path / "mpi_hostname_rank"
    inc = [f"-I{b / p / 'include'}" for b in nvidia_package_dirs() for p in ("nccl", "cuda_runtime", "cuda_nvcc")
           if (b / p / "include").is_dir()]
    subprocess.run([str(Path(sys.executable).parent / "mpicc"), "-Wall", "-Werror",
                    "-D__CUDA_FP16_H__", "-D__CUDA_BF16_H__", "-o", str(exe),
                    str(PROGRAMS / "mpi_hostname_rank.c"), *inc, f"-L{nccl_lib_dir()}",
                    f"-L{cudart_lib_dir()}", "-l:libnccl.so.2", "-l:libcudart.so.12"], check=True)
    run = tmp_path / "run"
    proc = _launch(run_cli, run, "--hosts", "2", "--gpus", "4", "--", str(exe))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in range(8):
        line = (run / "ranks" / str(rank) / "stdout").read_text().strip()
        m = re.fullmatch(r"rank (\d+) host (\S+) local rank (\d+) device (\d+) bus (\S+)", line)
        assert m, line
        host, local = rank // 4, rank % 4
        assert m.group(2) == f"ncclsim-h{host}" and int(m.group(3)) == local == int(m.group(4))


@pytest.mark.e2e
def test_ranks_waiting_in_mpi_leave_the_cpu(run_cli, tmp_path: Path) -> None:
    """MPICH polls while a rank waits in an MPI call; launch makes it sleep
    (its throttle and heavy yield, lengthened by the host library), so the
    ranks still working get the CPU. A user's own setting wins: with MPICH's
    polling restored the waiting ranks take the CPU again."""
    program = [sys.executable, str(Path(__file__).parent / "workloads" / "mpi_wait.py")]

    def waiting_cpu(run: Path, env: Optional[dict[str, str]] = None) -> list[float]:
        proc = _launch(run_cli, run, "--hosts", "2", "--gpus", "2", "--", *program, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = [(run / "ranks" / str(r) / "stdout").read_text().split() for r in range(4)]
        assert [int(line[0]) for line in lines] == [0, 1, 2, 3], lines
        assert all(float(line[2]) >= 1.0 for line in lines), lines  # each waited for rank 0's 1.5 s
        return [float(line[1]) / float(line[2]) for line in lines[1:]]  # the waiters' share of a CPU

    assert max(waiting_cpu(tmp_path / "run")) < 0.1
    polling = {"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "0", "MPIR_CVAR_ENABLE_HEAVY_YIELD": "0"}
    assert min(waiting_cpu(tmp_path / "polling", env=polling)) > 0.2


@pytest.mark.e2e
def test_a_gpu_waiting_for_a_late_peer_sleeps_until_woken(run_cli, tmp_path: Path) -> None:
    """An emulated GPU whose channels wait for words that ncclsim's writers
    wake them for (a peer's data) sleeps until woken, not in short naps: on
    1 x 2, rank 1 launches its AllReduce a second after rank 0
    (tests/workloads/late_peer.py). Napping 2 ms at a time, rank 0's stream
    workers were switched out about 500 times in that second."""
    run = tmp_path / "run"
    proc = _launch(run_cli, run, "--hosts", "1", "--gpus", "2", "--",
                   sys.executable, str(Path(__file__).parent / "workloads" / "late_peer.py"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = (run / "ranks" / "0" / "stdout").read_text()
    m = re.search(r"waited ([\d.]+) s for a peer ([\d.]+) s late; stream workers switched (\d+) times", out)
    assert m, out[-3000:]
    waited, late, switches = float(m.group(1)), float(m.group(2)), int(m.group(3))
    assert waited >= 0.8 * late, out  # it did wait for the peer
    assert switches < 50, out


@pytest.mark.e2e
def test_four_hosts_initialise(run_cli, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _launch(run_cli, run, "--hosts", "4", "--gpus", "8")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((run / "launch.json").read_text())["initialised"] == 32
    report = _report(run_cli, run)
    assert report["nnodes"] == 4
    # NCCL's own choice on 4 x 8 includes Tree with LL and LL128 (small sizes), all checked
    used = {(t["algorithm"], t["protocol"]) for t in report["tuning"] if t["collective"] == "AllReduce"}
    assert {("TREE", "LL"), ("TREE", "LL128")} <= used, used
    assert all(c["ok"] for c in report["checks"]), report["checks"]


# ---- failures: a clear message, a non-zero exit, nothing left behind ----

@pytest.mark.e2e
def test_a_failing_rank_is_named(run_cli, leftovers, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _launch(run_cli, run, "--hosts", "2", "--gpus", "2", "--", "sh", "-c",
                   'if [ "$PMI_RANK" = 3 ]; then echo "disk on fire" >&2; exit 7; fi; sleep 60')
    assert proc.returncode == 7
    assert re.search(r"rank 3 \(host 1\) exited with status 7: disk on fire; logs: \S+/ranks/3/stderr",
                     proc.stderr), proc.stderr
    assert "sleep" not in proc.stderr
    leftovers.assert_none(run)


@pytest.mark.e2e
def test_ranks_failing_alike_make_one_line(run_cli, leftovers, tmp_path: Path) -> None:
    """A bad argument every rank rejects: one line names the first rank, its
    message and logs, and the others, not a line per rank; that NCCL wrote no
    logs to report on follows from it and goes unsaid."""
    run = tmp_path / "run"
    proc = _launch(run_cli, run, "--hosts", "2", "--gpus", "2", "--",
                   sys.executable, "-m", "ncclsim.probe", "--ops", "allreduce", "--sizes", "8Q")
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if "exited with status" in line]
    assert len(lines) == 1, proc.stderr
    assert re.search(r"rank 0 \(host 0\) exited with status 2: ncclsim probe: not a size: '8Q'.*; "
                     r"logs: \S+/ranks/0/stderr.*; rank\(s\) 1-3 the same$", lines[0]), lines[0]
    assert "no report" not in proc.stderr, proc.stderr
    leftovers.assert_none(run)


@pytest.mark.e2e
def test_a_crashing_rank_is_named(run_cli, leftovers, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _launch(run_cli, run, "--hosts", "1", "--gpus", "2", "--", "sh", "-c",
                   'if [ "$PMI_RANK" = 1 ]; then kill -SEGV $$; fi; sleep 60')
    assert proc.returncode == 128 + 11
    assert "rank 1 (host 0) was killed by signal 11" in proc.stderr, proc.stderr
    leftovers.assert_none(run)


@pytest.mark.e2e
def test_a_hang_times_out(run_cli, leftovers, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _launch(run_cli, run, "--hosts", "2", "--gpus", "1", "--timeout", "2", "--",
                   "sh", "-c", 'if [ "$PMI_RANK" = 1 ]; then sleep 300; fi')
    assert proc.returncode == 124
    assert "timed out: rank(s) 1 still running were stopped" in proc.stderr, proc.stderr
    leftovers.assert_none(run)


@pytest.mark.e2e
def test_a_run_filling_the_memory_is_stopped(run_cli, leftovers, tmp_path: Path) -> None:
    """Ranks that take what --keep-free leaves are stopped at once, with the
    reason, rather than left to the kernel's out-of-memory killer; each rank
    is the kernel's first choice if it must pick, and runs nicer than the
    launcher watching it, as a batch thread (no preemption on waking)."""
    run = tmp_path / "run"
    left = room(meminfo())
    assert left is not None
    # The guard trips once the ranks take 1 GiB; they go on taking, 64 MiB at
    # a time up to half of what is left, so memory other processes free while
    # they run (a test before this one still ending) cannot hide them.
    keep_free = left - min(1 << 30, left // 8)
    steps = left // 4 // (64 << 20)
    start = time.monotonic()
    proc = _launch(run_cli, run, "--hosts", "1", "--gpus", "2", "--keep-free", str(keep_free), "--",
                   sys.executable, "-c", "import os, time; print(open('/proc/self/oom_score_adj').read().strip(), "
                   "os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0) == os.SCHED_BATCH, flush=True); "
                   f"taken = [b'x' * (64 << 20) for _ in range({steps}) if not time.sleep(0.01)]; time.sleep(60)")
    assert proc.returncode == 1, f"{proc.stderr}\nleft at the start {left}, now {room(meminfo())}"
    assert time.monotonic() - start < 60, "the ranks were not stopped"
    assert re.search(r"^ncclsim: this machine is nearly out of memory \(\d+\.\d GB left of \d+\.\d GB and "
                     r".*; --keep-free \d+\.\d GB\): every rank was stopped; a process per host "
                     r"\(--gpus-per-process 2; a program told so too: nccl-tests -g 2\) "
                     r"takes less memory than 2 per host; "
                     r"README", proc.stderr, re.M), proc.stderr
    assert "killed" not in proc.stderr, proc.stderr  # the guard's stop is not told as the ranks' failures
    assert proc.stdout.splitlines()[0] == "500 10 True", proc.stdout  # rank 0's oom_score_adj, nice, policy
    assert json.loads((run / "launch.json").read_text())["memory_low"].startswith("this machine is nearly out")
    leftovers.assert_none(run)


@pytest.mark.e2e
def test_a_rank_whose_nccl_init_fails_ends_the_run(run_cli, leftovers, tmp_path: Path) -> None:
    """Rank 1 cannot initialise NCCL (no such network) while rank 0 waits for it
    in NCCL's bootstrap: the probe ends the run with rank 1 named, not a hang."""
    run = tmp_path / "run"
    proc = _launch(run_cli, run, "--hosts", "2", "--gpus", "1", "--timeout", "120", "--", "sh", "-c",
                   f'if [ "$PMI_RANK" = 1 ]; then export NCCL_NET=nosuch; fi; '
                   f'exec "{sys.executable}" -m ncclsim.probe --ops allreduce', timeout=200)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert re.search(r"rank 1 \(host 1\) exited with status 1: ncclsim probe: rank 1: "
                     r"ncclGroupEnd \(init\) failed: NCCL error 5", proc.stderr), proc.stderr[-3000:]
    assert "Failed to initialize any NET plugin" in proc.stdout, proc.stdout[-3000:]
    leftovers.assert_none(run)


PROBE_OPS = ("allreduce", "allgather", "broadcast", "reduce", "reducescatter", "sendrecv", "alltoall")


def _probe(run_cli, leftovers, run: Path, hosts: int, sizes: tuple[int, ...],
           ops: tuple[str, ...] = PROBE_OPS,
           env: Optional[dict[str, str]] = None) -> dict:
    """Launch the probe across hosts; every output is checked by the probe
    itself against what NCCL must compute. Returns the report."""
    proc = run_cli("launch", "--run-dir", str(run), "--hosts", str(hosts), "--gpus", "8", "--timeout", "1500",
                   "--", sys.executable, "-m", "ncclsim.probe", "--ops", ",".join(ops),
                   "--sizes", ",".join(map(str, sizes)), env=env, timeout=1600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = (run / "ranks" / "0" / "stdout").read_text()
    for op in ops:
        for size in sizes:
            assert f"{op:<14} {size:>12} B  checked" in out, out[-3000:]
    assert "destroyed 1 communicator(s)" in out
    launch = json.loads((run / "launch.json").read_text())
    assert all(r["status"] == 0 for r in launch["ranks"])
    leftovers.assert_none(run)
    report = _report(run_cli, run)
    assert report["nnodes"] == hosts
    assert report["transports"]["inter_host"] and all(
        t.startswith("NET/ncclsim") for t in report["transports"]["inter_host"])
    return report


@pytest.mark.e2e
def test_cross_host_collectives_complete(run_cli, leftovers, tmp_path: Path) -> None:
    """2 x 8: every collective and send/receive from 8 B to 16 MiB crosses the
    hosts and completes with NCCL's results; every communicator is destroyed;
    the report has the algorithm and protocol NCCL chose per size."""
    sizes = (8, 65536, 1 << 20, 16 << 20)
    report = _probe(run_cli, leftovers, tmp_path / "run", 2, sizes)
    chosen = {(t["collective"], t["algorithm"], t["protocol"]) for t in report["tuning"]}
    assert {c for c, _, _ in chosen} == {"AllReduce", "AllGather", "Broadcast", "Reduce", "ReduceScatter"}, chosen
    assert {a for _, a, _ in chosen} <= {"RING", "TREE", "NVLS_TREE"}, chosen
    assert {p for _, _, p in chosen} >= {"LL", "LL128"}, chosen
    # H100s on NVSwitches with multicast: NCCL's NVLSTree for large AllReduce
    assert ("AllReduce", "NVLS_TREE", "SIMPLE") in chosen, chosen
    allreduce = {t["bytes"] for t in report["tuning"] if t["collective"] == "AllReduce"}
    assert allreduce == set(sizes)
    # send/receive between hosts goes through the proxy's shared buffers
    assert "NET/ncclsim/GDRDMA/Shared" in report["transports"]["inter_host"]


@pytest.mark.e2e
@pytest.mark.parametrize("preset,intra,inter", [
    ("dgx-a100", "P2P/CUMEM/read", "NET/ncclsim/GDRDMA"),  # P2P read mode on A100 NVLink
    ("pcie-l40s", "SHM/direct", "NET/ncclsim"),           # shared memory; NICs without GPU Direct
])
def test_cross_host_collectives_on_presets(run_cli, leftovers, tmp_path: Path, preset: str, intra: str,
                                           inter: str) -> None:
    """Other transports carry the emulated protocol too: every operation completes, checked."""
    run = tmp_path / "run"
    proc = run_cli("launch", "--run-dir", str(run), "--preset", preset, "--hosts", "2", "--gpus", "8",
                   "--timeout", "600", "--", sys.executable, "-m", "ncclsim.probe", "--ops", "all",
                   "--sizes", "8,1M", timeout=700)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = (run / "ranks" / "0" / "stdout").read_text()
    assert out.count(" checked") == 2 * len(PROBE_OPS), out[-3000:]
    report = _report(run_cli, run)
    assert intra in report["transports"]["intra_host"], report["transports"]
    assert inter in report["transports"]["inter_host"], report["transports"]
    leftovers.assert_none(run)


@pytest.mark.e2e
def test_one_dgx_b200_initialises_nccl(run_cli, leftovers, tmp_path: Path) -> None:
    """8 x B200 (sm_100) on NVLink 5 switches: NCCL initialises, sees every
    NVLink, and the built-in probe's AllReduce results check."""
    run = tmp_path / "run"
    proc = run_cli("launch", "--run-dir", str(run), "--preset", "dgx-b200", "--hosts", "1",
                   "--gpus", "8", "--timeout", "300", timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = (run / "ranks" / "0" / "stdout").read_text()
    assert out.count(" checked") == 4, out[-3000:]  # AllReduce, 8 B to 16 MiB
    report = _report(run_cli, run)
    assert all(c["ok"] for c in report["checks"]), report["checks"]
    assert {g["sm"] for g in report["topology"]["gpus"]} == {100}
    assert report["topology"]["nvlinks"] == 8 * 18
    assert report["nvls"]["supported"], report["nvls"]  # B200s on NVSwitches offer multicast
    leftovers.assert_none(run)


@pytest.mark.e2e
@pytest.mark.parametrize("algo,proto", [("Ring", None), ("Tree", "Simple")])
def test_four_hosts_by_algorithm(run_cli, leftovers, tmp_path: Path, algo: str, proto: Optional[str]) -> None:
    """4 x 8 with the algorithm (and protocol) forced: AllReduce completes.
    (Tree with NCCL's own protocols, LL and LL128, runs in the default probe
    of test_four_hosts_initialise, where NCCL picks it for small sizes.)"""
    env = {"NCCL_ALGO": algo, **({"NCCL_PROTO": proto} if proto else {})}
    report = _probe(run_cli, leftovers, tmp_path / "run", 4, (8, 1 << 20, 16 << 20), ("allreduce",), env)
    used = {(t["algorithm"], t["protocol"]) for t in report["tuning"] if t["collective"] == "AllReduce"}
    assert used and {a for a, _ in used} == {algo.upper()}, used
    if proto:
        assert {p for _, p in used} == {proto.upper()}, used


@pytest.mark.e2e
def test_a_stalled_collective_says_what_it_waits_for(run_cli, leftovers, tmp_path: Path) -> None:
    """Rank 1 never joins rank 0's AllReduce: rank 0's emulated kernel reports
    what it waits for, and --timeout stops both and names them."""
    run = tmp_path / "run"
    proc = run_cli("launch", "--run-dir", str(run), "--hosts", "2", "--gpus", "1", "--timeout", "12", "--",
                   sys.executable, str(Path(__file__).parent / "workloads" / "allreduce_one_side.py"),
                   env={"NCCLSIM_STALL_SECONDS": "2", "NCCL_RUNTIME_CONNECT": "0"}, timeout=120)
    assert proc.returncode == 124, proc.stderr[-3000:]
    assert "timed out: rank(s) 0-1 still running were stopped" in proc.stderr, proc.stderr[-3000:]
    err = (run / "ranks" / "0" / "stderr").read_text()
    assert "NCCL kernel emulation: no progress for 2 s" in err, err[-3000:]
    assert re.search(r"rank 0 channel \d+ AllReduce_Sum_f32_\w+.*: waiting for \w+( \w+)* (from|to) rank 1", err), \
        err[-3000:]
    leftovers.assert_none(run)


@pytest.mark.e2e
def test_an_aborted_collective_stops(run_cli, tmp_path: Path) -> None:
    """ncclCommAbort while the emulated kernel waits for a peer: NCCL's abort
    flag stops it, the stream completes, every rank exits 0."""
    run = tmp_path / "run"
    proc = run_cli("launch", "--run-dir", str(run), "--hosts", "2", "--gpus", "1", "--timeout", "60", "--",
                   sys.executable, str(Path(__file__).parent / "workloads" / "allreduce_one_side.py"), "abort",
                   env={"NCCL_RUNTIME_CONNECT": "0"}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the aborted collective's stream completed" in (run / "ranks" / "0" / "stdout").read_text()


@pytest.mark.e2e
def test_another_nccl_release(run_cli, tmp_path: Path) -> None:
    """--nccl: the ranks load that release (fetched once into the cache); its
    collectives cross the hosts too."""
    run = tmp_path / "run"
    proc = _launch(run_cli, run, "--nccl", "2.23.4", "--hosts", "2", "--gpus", "2", "--timeout", "300", "--",
                   sys.executable, "-m", "ncclsim.probe", "--ops", "allreduce,alltoall", "--sizes", "8,1M")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = _report(run_cli, run)
    assert report["nccl_version"].startswith("2.23.4")
    assert {r["nccl_version"][:6] for r in report["ranks"]} == {"2.23.4"}
    assert json.loads((run / "launch.json").read_text())["options"]["nccl"] == "2.23.4"
    # PAT as releases before 2.26 run it (one group of threads, packed ReduceScatter
    # slots), on a host count that is not a power of two; the release is cached now.
    pat = tmp_path / "pat"
    proc = _launch(run_cli, pat, "--nccl", "2.23.4", "--hosts", "7", "--gpus", "1", "--timeout", "300", "--",
                   sys.executable, "-m", "ncclsim.probe", "--ops", "allgather,reducescatter", "--sizes", "8,4096,3M",
                   env={"NCCL_ALGO": "PAT"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = (pat / "ranks" / "0" / "stdout").read_text()
    assert all(re.search(rf"{op} +{size} B  checked", out) for op in ("allgather", "reducescatter")
               for size in (8, 4096, 3 << 20)), out
    assert {t["algorithm"] for t in _report(run_cli, pat)["tuning"]} == {"PAT"}


@pytest.mark.e2e
def test_a_release_that_does_not_exist(run_cli, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _launch(run_cli, run, "--nccl", "2.99.1", "--hosts", "2")
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ncclsim: error: cannot fetch nvidia-nccl-cu12==2.99.1 from PyPI: "), proc.stderr
    assert not run.exists()


@pytest.mark.parametrize("args,message", [
    (["--hosts", "0"], "--hosts must be 1.."),
    (["--gpus", "0"], "--gpus must be at least 1"),
    (["--preset", "no-such-preset"], "no-such-preset"),
    (["--"], "missing command"),
    (["--", "/no/such/program"], "command not found: /no/such/program"),
    (["--gpus", "8", "--gpus-per-process", "3"], "does not divide"),
    (["--nccl", "cu14:2.30.7"], "unknown NCCL flavour 'cu14'"),
    (["--nccl", "2.30"], "not an NCCL version: '2.30'"),
    (["--keep-free", "3Q"], "--keep-free: not a size: '3Q'"),
    (["--keep-free", "1000T"], "less than the 1099511.6 GB a run keeps free (--keep-free)"),
])
def test_bad_arguments(run_cli, tmp_path: Path, args: list[str], message: str) -> None:
    run = tmp_path / "run"
    proc = _launch(run_cli, run, *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not run.exists() or not any(run.iterdir())


def test_malformed_preset_names_file_and_line(run_cli, tmp_path: Path) -> None:
    preset = tmp_path / "broken.yaml"
    preset.write_text("format: 1\nname: broken\nsockets: [\n")
    run = tmp_path / "run"
    proc = _launch(run_cli, run, "--preset", str(preset))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{preset}:4:1: not valid YAML" in lines[0], proc.stderr
    assert not run.exists()


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_launch_stops_its_ranks(ncclsim_exe: Path, clean_env: dict[str, str], leftovers,
                                          tmp_path: Path, sig: signal.Signals) -> None:
    """A job scheduler's SIGTERM (or Ctrl-C) stops every rank and cleans up;
    the launch exits with 128 + the signal."""
    run = tmp_path / "run"
    proc = subprocess.Popen([str(ncclsim_exe), "launch", "--run-dir", str(run), "--hosts", "2", "--gpus", "1",
                             "--", "sh", "-c", "echo started; sleep 300"],
                            cwd=tmp_path, env=clean_env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not all((run / "ranks" / str(r) / "stdout").exists() and
                  (run / "ranks" / str(r) / "stdout").read_text() for r in range(2)):
        assert time.monotonic() < deadline and proc.poll() is None, "the ranks did not start"
        time.sleep(0.1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert f"stopped by {sig.name}; stopping every rank" in err, err
    assert json.loads((run / "launch.json").read_text())["stopped_by_signal"] == sig
    leftovers.assert_none(run)


@pytest.mark.e2e
def test_each_simulated_host_is_an_mpi_node(run_cli, tmp_path: Path) -> None:
    """MPI's view of locality matches the simulated hosts: a shared-memory
    split and MPI_LOCALRANKID give each host's ranks; so do the variables of
    torch.distributed's env:// and torchrun's."""
    run = tmp_path / "run"
    torch_vars = ("RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT "
                  "PET_NNODES PET_NODE_RANK PET_NPROC_PER_NODE PET_MASTER_PORT").split()
    program = ("import os; from mpi4py import MPI; w = MPI.COMM_WORLD; "
               "local = w.Split_type(MPI.COMM_TYPE_SHARED); "
               "print(w.Get_rank(), local.Get_rank(), local.Get_size(), os.environ['MPI_LOCALRANKID'], "
               f"*(os.environ[k] for k in {torch_vars!r}))")
    proc = _launch(run_cli, run, "--hosts", "3", "--gpus", "2", "--", sys.executable, "-c", program)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ports = set()
    for rank in range(6):
        line = (run / "ranks" / str(rank) / "stdout").read_text().split()
        host, local = divmod(rank, 2)
        assert line[:4] == [str(rank), str(local), "2", str(local)], line
        *env, port, pet_nnodes, pet_node, pet_nproc, pet_port = line[4:]
        assert env == [str(rank), "6", str(local), "2", str(host), "127.0.0.1"], line
        assert (pet_nnodes, pet_node, pet_nproc, pet_port) == ("3", str(host), "1", port), line
        ports.add(port)
    assert len(ports) == 1 and 1024 <= int(ports.pop()) < 65536


@pytest.mark.parametrize("spread, user, want", [(False, None, "1"), (True, None, None), (False, "0", "0")],
                         ids=["one-machine", "spread", "user-set"])
def test_nccls_tcp_goes_over_unix_sockets_on_one_machine_only(tmp_path: Path, spread: bool, user: Optional[str],
                                                              want: Optional[str]) -> None:
    """The ranks' environment asks the host library for Unix sockets in the
    place of NCCL's TCP only when every rank runs on this machine (over
    several, NCCL's peers elsewhere need its TCP listeners); a value the user
    set wins."""
    base = {"PATH": os.environ.get("PATH", "")} | ({LOCAL_SOCKETS: user} if user else {})
    env = rank_environment(base, RunDir(tmp_path), "run", tmp_path, connect_at_init=False, spread=spread)
    assert env.get(LOCAL_SOCKETS) == want


@pytest.mark.parametrize("user", [None, ""], ids=["default", "user-off"])
def test_ranks_share_nccls_identical_regions_through_shared_memory(tmp_path: Path, user: Optional[str]) -> None:
    """The host library's store of NCCL's identical regions is named after the
    run in /dev/shm, so that the run's cleanup removes it with NCCL's
    segments (ncclsim-*); a value the user set wins ("" turns it off)."""
    base = {"PATH": os.environ.get("PATH", "")} | ({SHARED_PAGES: user} if user is not None else {})
    env = rank_environment(base, RunDir(tmp_path), "abc123", tmp_path, connect_at_init=False)
    if user is None:
        assert env[SHARED_PAGES] == "/dev/shm/ncclsim-pages-abc123"
        assert Path(env[SHARED_PAGES]).name.startswith(SHM_PREFIXES)
    else:
        assert env[SHARED_PAGES] == ""
