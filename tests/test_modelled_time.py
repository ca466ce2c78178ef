"""Modelled time (`launch --clock model`, fake_cuda/host/modelled_clock.c,
fake_cuda/driver/modelled_time.c, fake_cuda/device/step_time.c).

1. The program's clock, through NVIDIA's CUDA runtime with the host library
   preloaded: copies take what the simulated PCIe link and HBM give (events
   and the host clock agree), a sleep and a timed wait take exactly their
   duration, a clock read its modelled cost.
2. Code of the libraries that keep real time (NCCL's, the driver's) reads
   the real clock in the same process.
3. End to end on one 8 x H100 host: the probe's times follow the model's
   invariants (time grows with size, bus bandwidth rises to a plateau no
   higher than the links allow, NVLS above Ring), and two runs give the same
   modelled times. Across two hosts of one GPU, a large AllReduce runs at the
   NIC's rate; CollNet sends each host's data up once.
4. Without payload the times stay, the timeline holds every step, more hosts
   never make a Ring faster, Ring and Tree cross where NCCL's choice says.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

import pytest

import ncclsim.paths
from ncclsim.platform.models import GpuCatalog

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ROOT / "tests" / "workloads" / "cudart_checks.py"
TIMING = json.loads((ROOT / "ncclsim" / "platform" / "timing.json").read_text())["constants"]
READ_S = 25e-9  # what one clock read costs (CLOCK_READ_NS in modelled_clock.c)


def constant(name: str) -> float:
    return TIMING[name]["value"]


@pytest.fixture
def modelled_env(clean_env: dict[str, str], lib_dir: Path) -> dict[str, str]:
    env = dict(clean_env)
    env["LD_LIBRARY_PATH"] = f"{lib_dir}:{ncclsim.paths.cudart_lib_dir()}"
    env["LD_PRELOAD"] = str(lib_dir / "libncclsim-host.so")
    env["NCCLSIM_CLOCK"] = "model"
    env["NCCLSIM_LOG"] = "0"
    return env


@pytest.mark.e2e
def test_copies_sleeps_and_reads_take_their_modelled_time(modelled_env, catalog: GpuCatalog) -> None:
    r = subprocess.run([sys.executable, str(CHECKS), "modelled_time"], env=modelled_env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.split("RESULT ", 1)[1])
    size = 64 << 20
    h100 = catalog.get("h100")
    pcie = constant(f"pcie_gbps_per_lane_gen{h100.pcie_gen}") * h100.pcie_width * constant("pcie_efficiency")
    want = {"h2d": constant("copy_latency_us") * 1e-6 + size / (pcie * 1e9),
            "d2d": constant("copy_latency_us") * 1e-6 + size / (constant("hbm_gbps") / 2 * 1e9)}
    call = constant("host_call_us") * 1e-6  # the copy starts once the host has submitted it
    for name, seconds in want.items():
        assert res[name]["event_ms"] / 1e3 == pytest.approx(seconds + call, abs=2e-7), (name, res)
        # the host waited for the copy: its clock moved by the copy and the calls' host costs
        assert 0 <= res[name]["host_s"] - seconds < 5e-6, (name, res)
    assert 0.25 <= res["sleep_s"] < 0.25 + 1e-6, res  # the sleep and a few clock reads
    assert res["read_s"] == pytest.approx(READ_S, abs=1e-10)
    timed_out, waited = res["timed_wait"]
    assert timed_out is False and 0.5 <= waited < 0.5 + 1e-6, res["timed_wait"]


@pytest.mark.e2e
def test_a_full_queue_holds_the_host_until_a_slot_frees(modelled_env) -> None:
    """A stream holds about a thousand operations (fake_cuda/driver/streams.c):
    the host's next submission waits, in modelled time, for the operation
    whose completion frees a slot, however far ahead the emulation is."""
    r = subprocess.run([sys.executable, str(CHECKS), "modelled_queue"], env=modelled_env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.split("RESULT ", 1)[1])
    copy = constant("copy_latency_us") * 1e-6 + res["size"] / (constant("hbm_gbps") / 2 * 1e9)
    after, depth = res["after_s"], 1024
    assert after[depth - 2] < 10 * depth * constant("host_call_us") * 1e-6, "the host waited before the queue was full"
    for n in range(depth, len(after)):  # submission n + 1 needs copy n + 1 - depth done
        assert after[n] >= (n + 1 - depth) * copy * (1 - 1e-6), (n, after[n], copy)
    # the host outpaces the copies: at the end it waits for each one
    assert after[-1] == pytest.approx((len(after) - depth) * copy, rel=0.01), (after[-1], copy)
    assert res["synced_s"] == pytest.approx(len(after) * copy, rel=0.01)


def test_libraries_that_keep_real_time(modelled_env, tmp_path: Path) -> None:
    """A library named like NCCL's reads the real clock while the program's
    clock stands still (nothing modelled happens)."""
    src = tmp_path / "probe.c"
    src.write_text(textwrap.dedent("""\
        #include <time.h>
        double real_now(void) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            return ts.tv_sec + ts.tv_nsec * 1e-9;
        }
        """))
    lib = tmp_path / "libnccl-clockprobe.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", str(src), "-o", str(lib)], check=True)
    script = textwrap.dedent(f"""\
        import ctypes, json, time
        probe = ctypes.CDLL({str(lib)!r})
        probe.real_now.restype = ctypes.c_double
        m0, r0 = time.perf_counter(), probe.real_now()
        while probe.real_now() - r0 < 0.2:
            pass
        print(json.dumps({{"modelled": time.perf_counter() - m0, "real": probe.real_now() - r0}}))
        """)
    r = subprocess.run([sys.executable, "-c", script], env=modelled_env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert res["real"] >= 0.2 and res["modelled"] == pytest.approx(READ_S, abs=1e-10), res


SIZES = [8, 65536, 1 << 20, 16 << 20, 64 << 20]
ITERS = 3


def _probe(run_cli, tmp_path: Path, name: str, hosts: int, gpus: int, sizes: list[int], *options: str,
           env: Optional[dict[str, str]] = None, warmup: int = 1) -> tuple[dict, subprocess.CompletedProcess]:
    """A modelled probe AllReduce run: its run.json, and the launch (the
    probe's --json lands beside the run directory, as <name>.json)."""
    run = tmp_path / name
    proc = run_cli("launch", "--hosts", str(hosts), "--gpus", str(gpus), "--clock", "model", *options,
                   "--run-dir", str(run), "--timeout", "600", "--", sys.executable, "-m", "ncclsim.probe", "--ops",
                   "allreduce", "--sizes", ",".join(map(str, sizes)), "--iters", str(ITERS), "--warmup", str(warmup),
                   "--json", str(tmp_path / f"{name}.json"), env=env, timeout=700)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((run / "run.json").read_text()), proc


def _modelled_run(run_cli, tmp_path: Path, name: str, hosts: int = 1, gpus: int = 8,
                  sizes: list[int] = SIZES, *options: str) -> tuple[dict[int, float], dict]:
    """The probe's own (modelled) seconds per call by size, and run.json."""
    report, _ = _probe(run_cli, tmp_path, name, hosts, gpus, sizes, *options, warmup=2)
    ops = json.loads((tmp_path / f"{name}.json").read_text())["operations"]
    return {o["size"]: o["seconds"] / ITERS for o in ops}, report


def _timings(run_cli, tmp_path: Path, name: str, hosts: int, gpus: int, sizes: list[int], *options: str,
             env: Optional[dict[str, str]] = None) -> tuple[dict[tuple[str, int, str], dict], subprocess.CompletedProcess]:
    """run.json's timings of a probe AllReduce run, by (collective, size, algorithm)."""
    report, proc = _probe(run_cli, tmp_path, name, hosts, gpus, sizes, *options, env=env)
    return {(t["collective"], t["bytes"], t["algorithm"]): t for t in report["timings"]}, proc


@pytest.mark.e2e
def test_one_host_follows_the_model(run_cli, tmp_path: Path) -> None:
    seconds, report = _modelled_run(run_cli, tmp_path, "a")
    algos = {t["bytes"]: t["algorithm"] for t in report["tuning"] if t["collective"] == "AllReduce"}
    assert algos[65536] == "RING" and algos[64 << 20] == "NVLS", algos
    times = [seconds[s] for s in SIZES]
    assert times == sorted(times), seconds
    busbw = {s: s / t * 2 * 7 / 8 / 1e9 for s, t in seconds.items()}
    assert [busbw[s] for s in SIZES] == sorted(busbw[s] for s in SIZES), busbw
    # A small AllReduce costs a kernel's start and 14 NVLink hops; microseconds, not the emulation's milliseconds.
    assert 5e-6 < seconds[8] < 30e-6, seconds
    # NVLS beats what a ring could (the 18 links' payload one way) and stays within what they carry
    # both ways: each byte crosses once into the switch and once out.
    links = 18 * constant("nvlink_gbps_per_link")
    assert links * constant("nvlink_efficiency") < busbw[64 << 20] <= 2 * links, busbw
    # The model, not the emulation's speed nor the data, decides: the same
    # times again, here without payload.
    again, _ = _modelled_run(run_cli, tmp_path, "b", 1, 8, SIZES, "--no-payload")
    assert again == seconds


@pytest.mark.e2e
def test_two_hosts_run_at_the_nics_rate(run_cli, tmp_path: Path) -> None:
    """One GPU per host: a 16 MiB AllReduce is bound by the NIC (400 Gb/s on
    dgx-h100); a small one costs microseconds."""
    seconds, _ = _modelled_run(run_cli, tmp_path, "net", hosts=2, gpus=1, sizes=[8, 16 << 20])
    nic = 400 / 8 * constant("nic_efficiency")  # GB/s
    busbw = (16 << 20) / seconds[16 << 20] / 1e9  # 2 ranks: bus bandwidth = algorithm bandwidth
    assert 0.8 * nic < busbw <= nic, busbw
    assert 5e-6 < seconds[8] < 50e-6, seconds


@pytest.mark.e2e
def test_collnet_sends_each_hosts_data_up_once(run_cli, tmp_path: Path) -> None:
    """2 hosts x 2 GPUs with switches that reduce (--collnet): CollNet Direct
    sends each host's data through its NICs once, up to the switch, and gets
    the result back while it streams; a Ring crosses the NICs 2(n-1)/n times
    the data. So CollNet's bus bandwidth beats the Ring's, and stays within
    what the host's two NICs carry, counted as bus bandwidth."""
    env = {"NCCL_COLLNET_ENABLE": "1"}
    size = 16 << 20
    collnet, _ = _timings(run_cli, tmp_path, "collnet", 2, 2, [size], "--collnet", "--no-payload",
                          env={**env, "NCCL_ALGO": "CollNetDirect"})
    ring, _ = _timings(run_cli, tmp_path, "ring", 2, 2, [size], "--collnet", "--no-payload",
                       env={**env, "NCCL_ALGO": "Ring"})
    c, r = collnet[("AllReduce", size, "COLLNET_DIRECT")], ring[("AllReduce", size, "RING")]
    host_nics = 2 * 400 / 8 * constant("nic_efficiency")  # GB/s
    assert r["busbw_GBps"] < c["busbw_GBps"] <= host_nics * 2 * 3 / 4, (c, r)


@pytest.mark.e2e
def test_without_payload_the_times_stay_and_the_timeline_shows_every_step(run_cli, tmp_path: Path) -> None:
    """2 hosts x 2 GPUs: moving no data changes no modelled time; the report's
    timings follow size; the merged timeline has every rank's kernels, and
    every step lies inside its rank's kernel."""
    sizes = [8, 1 << 20, 8 << 20]
    bare, proc = _timings(run_cli, tmp_path, "bare", 2, 2, sizes, "--no-payload", "--timeline")
    assert "not checked: no payload moves" in proc.stdout + proc.stderr + (
        tmp_path / "bare" / "ranks" / "0" / "stdout").read_text()
    full, _ = _timings(run_cli, tmp_path, "full", 2, 2, sizes)
    assert bare.keys() == full.keys() and {k[1] for k in bare} >= set(sizes), (bare.keys(), full.keys())
    # Channels that reach a NIC at the same modelled instant are served in the
    # order the emulation's threads get there: a mid-size collective's time
    # varies by some percent from run to run.
    for key, t in full.items():
        assert bare[key]["time_us"] == pytest.approx(t["time_us"], rel=0.15), (key, bare[key], t)
    times = [next(t["time_us"] for k, t in full.items() if k[1] == s) for s in sizes]
    assert times == sorted(times) and times[0] < 50, times
    trace = json.loads((tmp_path / "bare" / "timeline.json").read_text())["traceEvents"]
    kernels: dict[int, list[dict]] = {}
    steps: dict[int, list[dict]] = {}
    for e in trace:
        if e.get("cat") in ("kernel", "step"):
            (kernels if e["cat"] == "kernel" else steps).setdefault(e["pid"], []).append(e)
    assert sorted(kernels) == sorted(steps) == [0, 1, 2, 3]
    for rank, ks in kernels.items():
        assert len(ks) == (ITERS + 1) * len(sizes), (rank, len(ks))
        spans = sorted((k["ts"], k["ts"] + k["dur"]) for k in ks)
        for s in steps[rank]:
            assert s["tid"] >= 1000 and ("send" in s["name"] or "recv" in s["name"] or s["name"] == "local")
            assert any(a - 1e-3 <= s["ts"] and s["ts"] + s["dur"] <= b + 1e-3 for a, b in spans), s


@pytest.mark.e2e
def test_more_hosts_never_make_a_ring_faster(run_cli, tmp_path: Path) -> None:
    """One GPU per host, NCCL's Ring forced: each added host adds hops and
    bytes through every NIC, so the time only grows (bus bandwidth, which
    counts those bytes, may rise a little towards the NIC's rate)."""
    ring = {"NCCL_ALGO": "Ring"}
    sizes = [8, 32 << 20]
    two, _ = _timings(run_cli, tmp_path, "two", 2, 1, sizes, "--no-payload", env=ring)
    four, _ = _timings(run_cli, tmp_path, "four", 4, 1, sizes, "--no-payload", env=ring)
    for s in sizes:
        a, b = two[("AllReduce", s, "RING")], four[("AllReduce", s, "RING")]
        assert b["time_us"] >= a["time_us"], (s, a, b)
    nic = 400 / 8 * constant("nic_efficiency")  # GB/s: both stay within their NICs' rate
    assert two[("AllReduce", 32 << 20, "RING")]["busbw_GBps"] <= nic
    assert four[("AllReduce", 32 << 20, "RING")]["busbw_GBps"] <= nic


@pytest.mark.e2e
def test_ring_and_tree_cross_where_nccl_says(run_cli, tmp_path: Path) -> None:
    """4 hosts of one GPU: NCCL picks Tree for small AllReduces and Ring for
    large ones; at every size the algorithm it picks is (within a few
    percent) the faster of the two when each is forced."""
    sizes = [8, 4096, 65536, 1 << 20]
    picked, _ = _timings(run_cli, tmp_path, "picked", 4, 1, sizes, "--no-payload")
    forced = {algo: _timings(run_cli, tmp_path, algo, 4, 1, sizes, "--no-payload", env={"NCCL_ALGO": algo})[0]
              for algo in ("Ring", "Tree")}
    choice = {k[1]: k[2] for k in picked}
    assert set(choice.values()) == {"TREE", "RING"}, choice  # there is a crossing to check
    for size, algo in choice.items():
        other = "RING" if algo == "TREE" else "TREE"
        mine = forced[algo.title()][("AllReduce", size, algo)]["time_us"]
        theirs = forced[other.title()][("AllReduce", size, other)]["time_us"]
        assert mine <= theirs * 1.05, (size, algo, mine, other, theirs)


@pytest.mark.e2e
def test_shared_memory_steps_wait_for_their_peer(run_cli, tmp_path: Path) -> None:
    """SHM connections (P2P off): whether NCCL's segments are cuMem host
    memory or files it maps and registers (NCCL_CUMEM_ENABLE=0), the time
    board names their slots alike in both processes, so a step waits for the
    peer's data: the same times either way, and a small AllReduce is not free."""
    shm = {"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}
    sizes = [8, 65536]
    cumem, _ = _timings(run_cli, tmp_path, "cumem", 1, 2, sizes, "--no-payload", env=shm)
    files, _ = _timings(run_cli, tmp_path, "files", 1, 2, sizes, "--no-payload", env={**shm, "NCCL_CUMEM_ENABLE": "0"})
    assert cumem.keys() == files.keys() and len(cumem) == len(sizes), (cumem.keys(), files.keys())
    for key, t in cumem.items():
        assert t["time_us"] > 0.5 and files[key]["time_us"] == pytest.approx(t["time_us"], rel=0.05), (key, t, files[key])
