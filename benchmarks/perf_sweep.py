#!/usr/bin/env python3
"""A benchmark program's size sweep under `ncclsim launch`: what it costs.

Builds nccl_perf (tests/programs/nccl_perf.cu, our all_reduce_perf-style
program) with nvcc against the NCCL wheel and the mpich wheel, then runs

    ncclsim launch --hosts H --gpus G -- nccl_perf -o OP -b 8 -e 128M -f 2 -c 0

(default 2 x 8; `--check` adds the same sweep with -c 1, every result checked
on the host), N times per variant. Reported, median of the runs:

* the whole command's wall time and CPU time (user, system: launch, mpiexec
  and every rank), and the CPU time the rest of the machine used meanwhile
  (other work competing for the CPUs);
* memory: every 200 ms, the PSS (/proc/<pid>/smaps_rollup) of every process
  whose environment carries the run's NCCLSIM_RUN_DIR (mpiexec, MPI's proxies,
  the rank.sh wrappers and the ranks; rank processes are those running the
  built nccl_perf): peak of the sum over all of them, over the ranks, and the
  worst rank's peak. Simulated device memory is host memory: 2 buffers of the
  largest size per rank (-e 128M: 256 MiB per rank, 4 GiB for 2 x 8);
* nccl_perf's own table from rank 0: per size, the slowest rank's time per
  operation, algorithm and bus bandwidth, and wrong values (-c 1).

The time of a collective on the simulator is the cost of emulating it on this
machine's CPUs (2 here), not a prediction of the cluster's. The launch takes
its libraries from the installed package (as launch_time.py; not a snapshot).

    python benchmarks/perf_sweep.py [--hosts 2] [--gpus 8] [--op allreduce] [--min 8] [--max 128M]
                                    [--factor 2] [--check] [--runs 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from ncclsim.paths import mpi_nvcc_flags, nccl_lib_dir  # the interpreter's ncclsim

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (loadavg, machine, machine_busy_s, median, ncclsim_exe, normal_priority,  # noqa: E402
                    raise_priority, rollup, ROOT, scan_run, table, temp_dir, write_json)

MB = 1e6
SOURCE = ROOT / "tests" / "programs" / "nccl_perf.cu"
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+float\s+(?:sum|none)\s+-?\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+|N/A)$")


# ---------------------------------------------------------------- build

def build(out_dir: Path) -> tuple[Path, float]:
    """nccl_perf and the seconds nvcc took."""
    if shutil.which("nvcc") is None:
        sys.exit("benchmarks: nvcc (CUDA toolkit) is not on PATH: nccl_perf cannot be built")
    nccl = nccl_lib_dir()
    exe = out_dir / "nccl_perf"
    t0 = time.perf_counter()
    p = subprocess.run(["nvcc", "-arch=sm_90", "-O2", "-o", str(exe), str(SOURCE), f"-I{nccl.parent / 'include'}",
                        f"-L{nccl}", "-l:libnccl.so.2", *mpi_nvcc_flags()], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"benchmarks: building nccl_perf failed:\n{p.stderr[-3000:]}")
    return exe, time.perf_counter() - t0


# ---------------------------------------------------------------- sampling


class RunSampler:
    """PSS of the run's processes, found by NCCLSIM_RUN_DIR in their environment."""

    def __init__(self, run_dir: Path, exe: Path) -> None:
        self.var = b"NCCLSIM_RUN_DIR=" + str(run_dir.resolve()).encode()
        self.exe = str(exe.resolve())
        self.launch_pid = 0  # its children carry the variable only once they exec
        self.members: dict[int, bool] = {}  # pid -> runs nccl_perf
        self.not_ours: set[int] = set()
        self.rank_peak: dict[int, int] = {}
        self.peak_all = self.peak_ranks = self.samples = 0
        self.pool = ThreadPoolExecutor(max_workers=16)  # a busy rank's smaps_rollup read can wait

    def _is_rank(self, pid: int) -> bool:
        try:
            return os.readlink(f"/proc/{pid}/exe") == self.exe
        except OSError:
            return False

    def _scan(self) -> None:
        scan_run(self.members, self.not_ours, self.launch_pid, lambda env: self.var in env, self._is_rank)

    def sample(self) -> None:
        self._scan()
        pids = list(self.members)
        total = ranks = 0
        for pid, r in zip(pids, self.pool.map(rollup, pids)):
            if r is None:
                continue
            if not self.members[pid]:  # rank.sh becomes nccl_perf only when it execs
                self.members[pid] = self._is_rank(pid)
            total += r[0]
            if self.members[pid]:
                ranks += r[0]
                self.rank_peak[pid] = max(self.rank_peak.get(pid, 0), r[0])
        self.peak_all = max(self.peak_all, total)
        self.peak_ranks = max(self.peak_ranks, ranks)
        self.samples += 1


# ---------------------------------------------------------------- one run

@dataclass
class Row:
    size: int
    count: int
    time_us: float
    algbw: float
    busbw: float
    wrong: Optional[int]


@dataclass
class Run:
    variant: str
    wall_s: float
    user_s: float
    sys_s: float
    others_s: float
    load1: float
    launch_seconds: float
    peak_all_pss_mb: float
    peak_ranks_pss_mb: float
    worst_rank_pss_mb: float
    rank_processes_sampled: int
    samples: int
    avg_busbw: float
    wrong: Optional[int]
    rows: list[Row] = field(default_factory=list)


def parse_rows(out: str) -> list[Row]:
    rows = []
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            rows.append(Row(int(m[1]), int(m[2]), float(m[3]), float(m[4]), float(m[5]),
                            None if m[6] == "N/A" else int(m[6])))
    return rows


def run_once(exe: Path, run_dir: Path, args: argparse.Namespace, check: bool) -> Run:
    perf = [str(exe), "-o", args.op, "-b", args.min, "-e", args.max, "-f", str(args.factor),
            "-n", str(args.iters), "-w", str(args.warmup), "-c", str(int(check))]
    cmd = [ncclsim_exe(), "launch", "--hosts", str(args.hosts), "--gpus", str(args.gpus),
           "--run-dir", str(run_dir), "--timeout", str(int(args.timeout)), "--", *perf]
    load1 = loadavg()[0]
    sampler = RunSampler(run_dir, exe)
    r0, s0 = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    m0, t0 = machine_busy_s(), time.perf_counter()
    log_path = run_dir.parent / f"{run_dir.name}.out"
    with open(log_path, "wb") as log:
        p = subprocess.Popen(cmd, cwd=run_dir.parent, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, preexec_fn=normal_priority)
        sampler.launch_pid = p.pid
        while p.poll() is None:
            sampler.sample()
            time.sleep(args.interval_ms / 1000)
    wall = time.perf_counter() - t0
    m1 = machine_busy_s()
    r1, s1 = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    user, sys_ = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
    mine = s1.ru_utime - s0.ru_utime + s1.ru_stime - s0.ru_stime
    if p.returncode != 0:
        sys.exit(f"benchmarks: {' '.join(cmd)} failed ({p.returncode}):\n"
                 f"{log_path.read_text(errors='replace')[-3000:]}")
    out = (run_dir / "ranks" / "0" / "stdout").read_text(errors="replace")
    rows = parse_rows(out)
    m = re.search(r"^# Avg bus bandwidth +: ([\d.]+)", out, re.M)
    doc = json.loads((run_dir / "launch.json").read_text())
    return Run(variant=f"-c {int(check)}", wall_s=round(wall, 3), user_s=round(user, 3),
               sys_s=round(sys_, 3), others_s=round(max(0.0, (m1 - m0) - user - sys_ - mine), 2), load1=load1,
               launch_seconds=doc["seconds"], peak_all_pss_mb=round(sampler.peak_all / MB, 1),
               peak_ranks_pss_mb=round(sampler.peak_ranks / MB, 1),
               worst_rank_pss_mb=round(max(sampler.rank_peak.values(), default=0) / MB, 1),
               rank_processes_sampled=len(sampler.rank_peak), samples=sampler.samples,
               avg_busbw=float(m.group(1)) if m else float("nan"),
               wrong=sum(r.wrong for r in rows) if check and rows else None, rows=rows)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=2, help="simulated hosts (default 2)")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per host (default 8)")
    ap.add_argument("--op", default="allreduce", help="nccl_perf -o (default allreduce)")
    ap.add_argument("--min", default="8", help="nccl_perf -b (default 8)")
    ap.add_argument("--max", default="128M", help="nccl_perf -e (default 128M)")
    ap.add_argument("--factor", type=int, default=2, help="nccl_perf -f (default 2)")
    ap.add_argument("--iters", type=int, default=5, help="nccl_perf -n (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="nccl_perf -w (default 1)")
    ap.add_argument("--check", action="store_true", help="also run the sweep with -c 1 (results checked)")
    ap.add_argument("--runs", type=int, default=1, help="runs per variant (median; default 1)")
    ap.add_argument("--interval-ms", type=float, default=200.0, help="memory sampling period (default 200)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="launch --timeout per run (default 1800)")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="keep the binary and run directories under DIR")
    ap.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    args = ap.parse_args(argv)
    ncclsim_exe()

    info = machine()
    info["sampler_nice_minus_10"] = raise_priority()
    variants = [False, True] if args.check else [False]
    runs: dict[bool, list[Run]] = {v: [] for v in variants}
    with temp_dir("perf") as tmp:
        base = args.keep.resolve() if args.keep else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        exe, build_s = build(base)
        print(f"  built {exe} in {build_s:.1f} s", file=sys.stderr)
        for i in range(args.runs):
            for check in variants:
                r = run_once(exe, base / f"run-c{int(check)}-{i}", args, check)
                runs[check].append(r)
                print(f"  run {i + 1}/{args.runs} {r.variant}: wall {r.wall_s:7.2f} s  user {r.user_s:6.1f} s"
                      f"  sys {r.sys_s:6.1f} s  others {r.others_s:5.1f} s  peak PSS {r.peak_all_pss_mb:7.0f} MB"
                      f"  ({r.rank_processes_sampled} ranks sampled)  wrong {r.wrong}  load {r.load1}",
                      file=sys.stderr)

    def med(rs: list[Run], key: str) -> float:
        return median(getattr(r, key) for r in rs)

    nranks = args.hosts * args.gpus
    print(f"{info['date_utc']}  {info['cpus']} CPUs ({info['cpu_model']}), {info['memory_gib']} GiB, "
          f"commit {info['commit']}; `ncclsim launch --hosts {args.hosts} --gpus {args.gpus} -- nccl_perf -o {args.op}"
          f" -b {args.min} -e {args.max} -f {args.factor} -n {args.iters} -w {args.warmup}`; median of {args.runs}"
          " run(s); MB = 10^6 bytes" + ("" if info["sampler_nice_minus_10"] else "; sampler at normal priority"))
    summary, results = [], []
    for check, rs in runs.items():
        wrong = [r.wrong for r in rs if r.wrong is not None]
        summary.append([f"{args.hosts} x {args.gpus}, -c {int(check)}", nranks, f"{med(rs, 'wall_s'):.1f}",
                        f"{med(rs, 'launch_seconds'):.1f}", f"{med(rs, 'user_s'):.1f}", f"{med(rs, 'sys_s'):.1f}",
                        f"{med(rs, 'others_s'):.1f}", f"{med(rs, 'peak_all_pss_mb'):,.0f}",
                        f"{med(rs, 'peak_ranks_pss_mb'):,.0f}", f"{med(rs, 'worst_rank_pss_mb'):.0f}",
                        f"{med(rs, 'avg_busbw'):.3f}", str(max(wrong)) if wrong else "not checked",
                        f"{median(r.load1 for r in rs):.1f}"])
        keys = [k for k, v in asdict(rs[0]).items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        results.append({"check": check, "median": {k: round(med(rs, k), 3) for k in keys},
                        "runs": [asdict(r) for r in rs]})
    print(table(["config", "ranks", "wall s", "launch.json s", "user s", "sys s", "others' CPU s",
                 "peak PSS, all run processes (MB)", "peak PSS, ranks (MB)", "worst rank peak PSS (MB)",
                 "avg busbw (GB/s)", "wrong values", "load1"], summary))
    for check, rs in runs.items():
        sizes = [row.size for row in rs[0].rows]
        per_size = []
        for k, size in enumerate(sizes):
            got = [r.rows[k] for r in rs if len(r.rows) > k and r.rows[k].size == size]
            wrong = [g.wrong for g in got if g.wrong is not None]
            per_size.append([f"{size:,}", f"{got[0].count:,}", f"{median(g.time_us for g in got):,.1f}",
                             f"{median(g.algbw for g in got):.3f}", f"{median(g.busbw for g in got):.3f}",
                             str(max(wrong)) if wrong else "N/A"])
        print(f"\nnccl_perf's table, -c {int(check)} (rank 0; time = the slowest rank's, per operation; median):")
        print(table(["size (B)", "count", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"], per_size))
    write_json(args.json, {"benchmark": "perf_sweep", "machine": info, "hosts": args.hosts, "gpus": args.gpus,
                           "op": args.op, "min": args.min, "max": args.max, "factor": args.factor,
                           "iters": args.iters, "warmup": args.warmup, "runs_per_variant": args.runs,
                           "interval_ms": args.interval_ms, "loadavg_end": loadavg(), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
