#!/usr/bin/env python3
"""Wall time and memory of `ncclsim launch` (simulated hosts through MPI).

Runs `ncclsim launch --hosts H --gpus G --gpus-per-process N --run-dir DIR`
with its default command (the built-in probe, init only: one communicator over
every rank, every channel connected at init since launch sets
NCCL_RUNTIME_CONNECT=0, then destroyed), N times per configuration
(interleaved), with the console script `ncclsim` beside the interpreter.
Reported, median of the runs:

* the whole command's wall time and CPU time (user, system: launch, mpiexec
  and every rank), and the CPU time the rest of the machine used meanwhile
  (other work competing for the CPUs);
* from `<run>/launch.json`: `seconds` (mpiexec start to the last rank's end,
  as launch measures it) and `initialised` (rank processes whose NCCL log
  says Init COMPLETE; launch's `nranks` counts processes too, so 2 x 8 with
  8 GPUs per process reports 2 of 2);
* NCCL's own `Init timings` line of rank 0 (`<run>/ranks/0/nccl.<pid>.log`): total
  and its parts (bootstrap, allgathers, topo, graphs, connections, ...), and
  the slowest rank's total;
* memory: every 100 ms, the PSS (/proc/<pid>/smaps_rollup) of every process
  whose environment (/proc/<pid>/environ) carries the launch's
  NCCLSIM_RUN_ID. Rank processes are those running the probe; the others are
  mpiexec, MPI's proxies and the rank.sh wrappers. Peak of the sum over rank
  processes, peak of the sum over all the run's processes, and per rank (a
  process's PSS / its GPUs): the worst rank's peak, the mean of the ranks'
  peaks, and the worst rank's "sustained" level (held 5 samples, 500 ms);
  and the peak size of the /dev/shm files created during the run (NCCL's
  segments, allocated in full when created, counted in PSS only where a
  process has touched them).

The sampler runs at nice -10 where it may (as root; the launch and its ranks
at 0), so that it keeps its 100 ms period while 64 ranks share 2 cores.

Configurations are HOSTSxGPUS or HOSTSxGPUS/GPUS_PER_PROCESS. The default,
1x8,2x8,2x8/8,4x8,8x8, takes about 2.2 minutes on an idle 2-core machine
(3.5 while other work loads it), half of it 8x8 (64 rank processes, ~8 GB of
memory): `--configs 1x8,2x8,2x8/8,4x8` for the other half.

The launch uses ncclsim/lib in place (launch takes its libraries from the
package), unlike the other scripts, which snapshot it.

    python benchmarks/launch_time.py [--configs 1x8,2x8,2x8/8,4x8,8x8] [--runs 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ncclsim.rundir import RunDir  # noqa: E402
from common import (loadavg, machine, machine_busy_s, median, ncclsim_exe, normal_priority,  # noqa: E402
                    PYTHON, raise_priority, rollup, scan_run, ROOT, table, temp_dir, write_json)

MB = 1e6
SUSTAIN = 5
INIT_RE = re.compile(r"Init timings - ncclCommInitRank: rank (\d+) nranks (\d+) total ([\d.]+) \(([^)]*)\)")


def lib_fingerprint() -> dict[str, str]:
    """sha256 (first 12 hex digits) of each library launch will use (ncclsim/lib in
    place: a rebuild during the measurement changes what is measured)."""
    import hashlib
    out = {}
    for f in sorted((ROOT / "ncclsim" / "lib").glob("*.so*")):
        try:
            out[f.name] = hashlib.sha256(f.read_bytes()).hexdigest()[:12]
        except OSError:
            pass
    return out


@dataclass(frozen=True)
class Config:
    hosts: int
    gpus: int
    gpus_per_process: int

    @property
    def label(self) -> str:
        s = f"{self.hosts} x {self.gpus}"
        return s + (f", {self.gpus_per_process} GPUs/process" if self.gpus_per_process > 1 else "")

    @property
    def nranks(self) -> int:
        return self.hosts * self.gpus

    @property
    def processes(self) -> int:
        return self.nranks // self.gpus_per_process


def parse_configs(text: str) -> list[Config]:
    out = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)x(\d+)(?:/(\d+))?\s*", item)
        if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
            sys.exit(f"benchmarks: not a configuration HOSTSxGPUS[/GPUS_PER_PROCESS]: {item!r}")
        n = int(m.group(3) or 1)
        if n < 1 or int(m.group(2)) % n:
            sys.exit(f"benchmarks: GPUs per process must divide the GPUs of a host: {item!r}")
        out.append(Config(int(m.group(1)), int(m.group(2)), n))
    return out


# ---------------------------------------------------------------- sampling


def _shm_names() -> set[str]:
    try:
        return {e.name for e in os.scandir("/dev/shm")}
    except OSError:
        return set()


def _shm_allocated(before: set[str]) -> int:
    """Bytes allocated to /dev/shm files that are not in `before` (NCCL's proxy ops
    pools and SHM buffers, MPI's segments). They cost memory from creation
    (NCCL fallocates them), whether or not a process has touched them; PSS
    counts them only where a process maps and touches them."""
    total = 0
    try:
        for e in os.scandir("/dev/shm"):
            if e.name not in before:
                try:
                    total += e.stat(follow_symlinks=False).st_blocks * 512
                except OSError:
                    pass
    except OSError:
        pass
    return total


def _is_rank(pid: int) -> bool:
    """The probe itself (python -m ncclsim.probe), not mpiexec, MPI's proxy or rank.sh."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return argv[1:3] == [b"-m", b"ncclsim.probe"]


class RunSampler:
    """Finds the run's processes by NCCLSIM_RUN_ID in their environment (the id is
    learnt from the first process whose NCCLSIM_RUN_DIR is our run directory)."""

    def __init__(self, run_dir: Path) -> None:
        self.launch_pid = 0  # its children may not have exec'd into the run's environment yet
        self.run_dir_var = b"NCCLSIM_RUN_DIR=" + str(run_dir.resolve()).encode()
        self.run_id: Optional[str] = None
        self.not_ours: set[int] = set()
        self.members: dict[int, bool] = {}  # pid -> is a rank process
        self.pss: dict[int, list[int]] = {}  # rank pid -> samples
        self.peak_rss: dict[int, int] = {}
        self.peak_ranks_pss = 0
        self.peak_all_pss = 0
        self.peak_processes = 0
        self.samples = 0
        self.shm_before = _shm_names()
        # smaps_rollup takes the process's mmap lock: with 64 ranks busy mapping and
        # faulting, one read can wait 0.5 s (7 s for all 64 in turn). Read in parallel.
        self.pool = ThreadPoolExecutor(max_workers=32)
        self.peak_shm = 0  # bytes allocated to /dev/shm files that appeared during the run

    def _belongs(self, env: list[bytes]) -> Optional[bool]:
        if self.run_id is None:  # learnt from the first process of our run directory
            if self.run_dir_var not in env:
                return None
            self.run_id = next((e.split(b"=", 1)[1].decode() for e in env
                                if e.startswith(b"NCCLSIM_RUN_ID=")), None)
            if self.run_id is None:
                return None
        return f"NCCLSIM_RUN_ID={self.run_id}".encode() in env

    def _scan(self) -> None:
        scan_run(self.members, self.not_ours, self.launch_pid, self._belongs, _is_rank)

    def sample(self) -> None:
        self._scan()
        ranks_total = all_total = alive = 0
        members = list(self.members.items())
        for (pid, is_rank), r in zip(members, self.pool.map(rollup, [m[0] for m in members])):
            if r is None:
                continue
            if is_rank is False and pid not in self.pss:
                # a rank.sh child is python only after exec: look again while it is young
                is_rank = self.members[pid] = _is_rank(pid)
            alive += 1
            pss, rss = r
            all_total += pss
            if is_rank:
                ranks_total += pss
                self.pss.setdefault(pid, []).append(pss)
                self.peak_rss[pid] = max(self.peak_rss.get(pid, 0), rss)
        self.peak_ranks_pss = max(self.peak_ranks_pss, ranks_total)
        self.peak_all_pss = max(self.peak_all_pss, all_total)
        self.peak_processes = max(self.peak_processes, alive)
        self.peak_shm = max(self.peak_shm, _shm_allocated(self.shm_before))
        self.samples += 1


def sustained(samples: list[int], n: int) -> int:
    if len(samples) < n:
        return min(samples, default=0)
    return max(min(samples[i:i + n]) for i in range(len(samples) - n + 1))


# ---------------------------------------------------------------- one run

@dataclass
class Run:
    wall_s: float
    user_s: float
    sys_s: float
    others_s: float
    load1: float
    launch_seconds: float
    initialised: int  # rank processes (launch counts processes: GPUs-per-process 8 gives 2 for 2 x 8)
    processes: int  # launch.json's nranks
    status: int
    nccl_total_s: float  # rank 0
    nccl_parts_s: dict[str, float]  # rank 0
    nccl_slowest_total_s: float  # over all ranks
    rank_processes_sampled: int
    peak_ranks_pss_mb: float
    peak_all_pss_mb: float
    peak_new_shm_mb: float  # /dev/shm files created during the run
    worst_rank_pss_mb: float  # per rank: a process's peak / its GPUs
    mean_rank_pss_mb: float
    worst_rank_sustained_mb: float
    worst_rank_rss_mb: float
    samples: int
    sample_period_s: float  # wall time / samples: smaps_rollup reads can wait on busy ranks
    sampler_cpu_s: float
    notes: list[str] = field(default_factory=list)


def init_timings(run_dir: Path, nranks: int) -> tuple[float, dict[str, float], float]:
    """Rank 0's Init timings line (total, parts) and the slowest rank's total."""
    total0, parts0, slowest = float("nan"), {}, 0.0
    for r in range(nranks):
        try:
            text = "".join(p.read_text(errors="replace") for p in RunDir(run_dir).rank(r).nccl_logs())
        except OSError:
            continue
        for m in INIT_RE.finditer(text):
            total = float(m.group(3))
            slowest = max(slowest, total)
            if int(m.group(1)) == 0:
                total0 = total
                for part in m.group(4).split(","):
                    name, _, value = part.strip().rpartition(" ")
                    try:
                        parts0[name] = float(value)
                    except ValueError:
                        pass
    return total0, parts0, slowest


def run_once(c: Config, run_dir: Path, interval: float, timeout: float) -> Run:
    # The probe, init only, every channel connected at init (what launch's
    # default probe did before it ran AllReduce too): NCCL initialisation alone.
    cmd = [ncclsim_exe(), "launch", "--hosts", str(c.hosts), "--gpus", str(c.gpus),
           "--gpus-per-process", str(c.gpus_per_process), "--run-dir", str(run_dir),
           "--timeout", str(int(timeout)), "--", PYTHON, "-m", "ncclsim.probe",
           "--gpus-per-process", str(c.gpus_per_process)]
    env = {**os.environ, "NCCL_RUNTIME_CONNECT": "0"}
    load1 = loadavg()[0]
    sampler = RunSampler(run_dir)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s0 = resource.getrusage(resource.RUSAGE_SELF)
    m0 = machine_busy_s()
    t0 = time.perf_counter()
    with open(run_dir.parent / f"{run_dir.name}.out", "wb") as log:
        p = subprocess.Popen(cmd, cwd=run_dir.parent, stdout=log, stderr=subprocess.STDOUT, env=env,
                             stdin=subprocess.DEVNULL, preexec_fn=normal_priority)
        sampler.launch_pid = p.pid
        while p.poll() is None:
            sampler.sample()
            time.sleep(interval)
    wall = time.perf_counter() - t0
    m1 = machine_busy_s()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s1 = resource.getrusage(resource.RUSAGE_SELF)
    user, sys_ = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
    mine = s1.ru_utime - s0.ru_utime + s1.ru_stime - s0.ru_stime
    out = (run_dir.parent / f"{run_dir.name}.out").read_text(errors="replace")
    if p.returncode != 0:
        sys.exit(f"benchmarks: {' '.join(cmd)} failed ({p.returncode}):\n{out[-3000:]}")
    doc = json.loads((run_dir / "launch.json").read_text())
    notes = []
    if sampler.run_id != doc["run_id"]:
        notes.append(f"sampled run id {sampler.run_id} != launch.json's {doc['run_id']}")
    if len(sampler.pss) != c.processes:
        notes.append(f"sampled {len(sampler.pss)} of {c.processes} rank processes")
    total0, parts0, slowest = init_timings(run_dir, c.nranks)
    per = c.gpus_per_process
    peaks = [max(v) for v in sampler.pss.values()] or [0]
    return Run(
        wall_s=round(wall, 3), user_s=round(user, 3), sys_s=round(sys_, 3),
        others_s=round(max(0.0, (m1 - m0) - user - sys_ - mine), 2), load1=load1,
        launch_seconds=doc["seconds"], initialised=doc["initialised"], processes=doc["processes"],
        status=doc["status"],
        nccl_total_s=total0, nccl_parts_s=parts0, nccl_slowest_total_s=slowest,
        rank_processes_sampled=len(sampler.pss),
        peak_ranks_pss_mb=round(sampler.peak_ranks_pss / MB, 1),
        peak_all_pss_mb=round(sampler.peak_all_pss / MB, 1),
        peak_new_shm_mb=round(sampler.peak_shm / MB, 1),
        worst_rank_pss_mb=round(max(peaks) / per / MB, 2),
        mean_rank_pss_mb=round(sum(peaks) / len(peaks) / per / MB, 2),
        worst_rank_sustained_mb=round(max((sustained(v, SUSTAIN) for v in sampler.pss.values()),
                                          default=0) / per / MB, 2),
        worst_rank_rss_mb=round(max(sampler.peak_rss.values(), default=0) / per / MB, 2),
        samples=sampler.samples, sample_period_s=round(wall / max(1, sampler.samples), 3),
        sampler_cpu_s=round(mine, 2), notes=notes)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per configuration (median; default 3)")
    ap.add_argument("--configs", default="1x8,2x8,2x8/8,4x8,8x8",
                    help="HOSTSxGPUS[/GPUS_PER_PROCESS] list (default 1x8,2x8,2x8/8,4x8,8x8)")
    ap.add_argument("--interval-ms", type=float, default=100.0, help="memory sampling period (default 100)")
    ap.add_argument("--timeout", type=float, default=300.0, help="launch --timeout per run (default 300)")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="keep the run directories under DIR")
    ap.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    args = ap.parse_args(argv)
    configs = parse_configs(args.configs)
    ncclsim_exe()

    info = machine()
    info["sampler_nice_minus_10"] = raise_priority()
    libs_start = lib_fingerprint()
    runs: dict[Config, list[Run]] = {c: [] for c in configs}
    with temp_dir("launch") as tmp:
        base = args.keep.resolve() if args.keep else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        for i in range(args.runs):
            for c in configs:
                d = base / f"run-{c.hosts}x{c.gpus}-{c.gpus_per_process}-{i}"
                r = run_once(c, d, args.interval_ms / 1000, args.timeout)
                runs[c].append(r)
                print(f"  run {i + 1}/{args.runs} {c.label:<22} wall {r.wall_s:6.2f} s  launch {r.launch_seconds:6.2f} s"
                      f"  NCCL init {r.nccl_total_s:5.2f} s (connections {r.nccl_parts_s.get('connections', 0):5.2f})"
                      f"  PSS {r.peak_ranks_pss_mb:7.1f} MB, worst rank {r.worst_rank_pss_mb:5.1f} MB"
                      f"  user {r.user_s:5.1f} sys {r.sys_s:5.1f} others {r.others_s:5.1f} s  load {r.load1}"
                      + (f"  [{'; '.join(r.notes)}]" if r.notes else ""), file=sys.stderr)
        version = "?"
        first = base / f"run-{configs[0].hosts}x{configs[0].gpus}-{configs[0].gpus_per_process}-0"
        logs = RunDir(first).rank(0).nccl_logs()
        m = re.search(r"NCCL version (\S+)", logs[0].read_text(errors="replace")) if logs else None
        if m:
            version = m.group(1)

    def med(rs: list[Run], key: str) -> float:
        return median(getattr(r, key) for r in rs)

    def med_part(rs: list[Run], part: str) -> float:
        return median(r.nccl_parts_s.get(part, float("nan")) for r in rs)

    print(f"{info['date_utc']}  {info['cpus']} CPUs ({info['cpu_model']}), {info['memory_gib']} GiB, "
          f"commit {info['commit']}, NCCL {version}; `ncclsim launch` (probe, init only); median of {args.runs} runs;"
          " MB = 10^6 bytes" + ("" if info["sampler_nice_minus_10"] else
                                 "; sampler at normal priority (not root): sparse samples with many ranks"))
    rows1, rows2, results = [], [], []
    for c, rs in runs.items():
        rows1.append([c.label, c.nranks, c.processes, f"{med(rs, 'wall_s'):.1f}", f"{med(rs, 'launch_seconds'):.1f}",
                      f"{min(r.initialised for r in rs)}/{rs[0].processes}",
                      f"{med(rs, 'nccl_total_s'):.2f}", f"{med_part(rs, 'connections'):.2f}",
                      f"{med_part(rs, 'topo'):.2f}", f"{med_part(rs, 'graphs'):.2f}",
                      f"{med_part(rs, 'bootstrap') + med_part(rs, 'allgathers'):.2f}",
                      f"{med(rs, 'nccl_slowest_total_s'):.2f}",
                      f"{med(rs, 'user_s'):.1f}", f"{med(rs, 'sys_s'):.1f}", f"{med(rs, 'others_s'):.1f}",
                      f"{med(rs, 'load1'):.1f}"])
        rows2.append([c.label, f"{med(rs, 'peak_ranks_pss_mb'):.0f}", f"{med(rs, 'peak_all_pss_mb'):.0f}",
                      f"{med(rs, 'peak_new_shm_mb'):.0f}",
                      f"{med(rs, 'worst_rank_pss_mb'):.1f}", f"{med(rs, 'mean_rank_pss_mb'):.1f}",
                      f"{med(rs, 'worst_rank_sustained_mb'):.1f}", f"{med(rs, 'worst_rank_rss_mb'):.1f}",
                      f"{med(rs, 'samples'):.0f}", f"{med(rs, 'sample_period_s'):.2f}",
                      f"{med(rs, 'sampler_cpu_s'):.1f}"])
        keys = [k for k, v in asdict(rs[0]).items() if isinstance(v, (int, float))]
        results.append({"config": c.label, "hosts": c.hosts, "gpus": c.gpus,
                        "gpus_per_process": c.gpus_per_process, "nranks": c.nranks, "processes": c.processes,
                        "median": {**{k: round(med(rs, k), 3) for k in keys},
                                   **{f"nccl_{p}_s": round(med_part(rs, p), 3) for p in rs[0].nccl_parts_s}},
                        "runs": [asdict(r) for r in rs]})
    print(table(["config", "ranks", "processes", "wall s", "launch.json s", "initialised (processes)", "NCCL init s (rank 0)",
                 "connections", "topo", "graphs", "bootstrap + allgathers", "slowest rank's init", "user s",
                 "sys s", "others' CPU s", "load1"], rows1))
    print()
    print(table(["config", "peak PSS, rank processes (MB)", "peak PSS, all run processes (MB)",
                 "peak new /dev/shm (MB)",
                 "PSS/rank peak, worst (MB)", "PSS/rank peak, mean (MB)", "PSS/rank sustained, worst (MB)",
                 "RSS/rank peak, worst (MB)", "samples", "s per sample", "sampler CPU s"], rows2))
    libs_end = lib_fingerprint()
    if libs_end != libs_start:
        print("WARNING: ncclsim/lib changed during the measurement (rebuilt?): runs used different libraries",
              file=sys.stderr)
    write_json(args.json, {"benchmark": "launch_time", "machine": info, "nccl_version": version,
                           "libraries_sha256": libs_start, "libraries_changed_during_run": libs_end != libs_start,
                           "runs_per_config": args.runs, "interval_ms": args.interval_ms,
                           "loadavg_end": loadavg(), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
