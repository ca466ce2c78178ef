#!/usr/bin/env python3
"""Resident memory per simulated rank: proportional set size (PSS).

Runs the built-in probe (default `--ops allreduce --sizes 1M`) as 8 MPI
processes x 1 GPU and as 1 process x 8 GPUs, and samples from outside, every
50 ms while the ranks live, each rank process's /proc/<pid>/smaps_rollup.
PSS counts a page shared by k processes as 1/k, so the sum over the processes
is what the run costs the machine. Reported per rank:

* 8 x 1: the largest per-process peak (worst rank), the mean of the
  per-process peaks, and the peak of the sum over ranks / 8;
* 1 x 8: the process's peak / 8;

and, next to each peak, the "sustained" level: the highest PSS a process
held for 5 consecutive samples (250 ms), which leaves out NCCL's short-lived
init allocations (a spike of ~0.1 s) that a 50 ms sampler catches only
sometimes.

The project's aim is <= 40 MB (10^6 bytes) of PSS per rank. For one rank
process the script also breaks its PSS down by mapping (NCCL's code, the
simulated device memory memfds, anonymous memory, Python...) at its peak.

--env NAME=VALUE (repeatable) sets a variable for the probe (e.g.
NCCL_CUMEM_ENABLE=0, NCCL's legacy cudaMalloc path).

    python benchmarks/memory.py [--runs 3] [--env NCCL_X=1] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (KIB, loadavg, machine, median, parse_configs, probe_command, rollup, ROOT,  # noqa: E402
                    sim_env, snapshot_libs, table, temp_dir, write_json)

AIM_MB = 40.0
SUSTAIN = 5  # samples: a level held this long (250 ms at 50 ms) is not a transient spike
MB = 1e6


def children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = defaultdict(list)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids[ppid].append(int(d))
    return kids


def descendants(pid: int) -> list[int]:
    kids = children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def is_rank(pid: int) -> bool:
    """A probe process (python -m ncclsim.probe), not mpiexec or MPI's proxy."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"ncclsim.probe" in argv and not any(b"mpiexec" in a or b"hydra" in a for a in argv[:1])




def category(path: str) -> str:
    if not path:
        return "anonymous (malloc, thread stacks, NCCL host memory)"
    if "/memfd:ncclsim" in path:
        return "simulated memory (ncclsim memfds)"
    if "/memfd:" in path or path.startswith("/dev/shm"):
        return "other shared memory (memfd, /dev/shm)"
    if "libnccl" in path:
        return "libnccl.so"
    if "libcudart" in path:
        return "libcudart.so"
    if "ncclsim/lib" in path or "libcuda.so" in path or "libnvidia-ml" in path or "libncclsim" in path:
        return "ncclsim libraries (libcuda, libnvidia-ml, host preload)"
    if "mpi" in path.lower():
        return "MPI (libmpi, mpi4py)"
    if "python" in path or "site-packages" in path:
        return "Python (interpreter, modules)"
    if path == "[heap]":
        return "[heap]"
    if path.startswith("[stack"):
        return "[stack]"
    if path.startswith("["):
        return "kernel ([vdso], [vvar], ...)"
    return "other files (libc, libstdc++, ...)"


def breakdown(pid: int) -> Optional[dict[str, int]]:
    """PSS by mapping category, bytes."""
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return None
    out: dict[str, int] = defaultdict(int)
    cat = "?"
    for line in text.splitlines():
        first = line.split(maxsplit=1)[0] if line else ""
        if "-" in first and not first.endswith(":"):  # a mapping header
            parts = line.split(maxsplit=5)
            cat = category(parts[5].strip() if len(parts) > 5 else "")
        elif first == "Pss:":
            out[cat] += int(line.split()[1]) * KIB
    return dict(out)


def sustained(samples: list[int], n: int) -> int:
    """The highest level held for n consecutive samples (max of the rolling minimum)."""
    if len(samples) < n:
        return min(samples, default=0)
    return max(min(samples[i:i + n]) for i in range(len(samples) - n + 1))


@dataclass
class Sampled:
    config: str
    processes: int
    gpus_per_process: int
    peak_pss: dict[int, int] = field(default_factory=dict)   # pid -> bytes
    peak_rss: dict[int, int] = field(default_factory=dict)
    peak_sum_pss: int = 0
    pss_samples: dict[int, list[int]] = field(default_factory=dict)  # pid -> every sample
    samples: int = 0
    wall_s: float = 0.0
    load1: float = 0.0
    breakdown: dict[str, int] = field(default_factory=dict)  # one rank process, at its peak

    def per_rank_mb(self) -> dict[str, float]:
        ranks = self.processes * self.gpus_per_process
        procs = list(self.peak_pss.values()) or [0]
        held = [sustained(v, SUSTAIN) for v in self.pss_samples.values()] or [0]
        return {"worst_rank_mb": max(procs) / self.gpus_per_process / MB,
                "worst_rank_sustained_mb": max(held) / self.gpus_per_process / MB,
                "mean_rank_mb": sum(procs) / len(procs) / self.gpus_per_process / MB,
                "sum_peak_per_rank_mb": self.peak_sum_pss / ranks / MB,
                "total_peak_mb": self.peak_sum_pss / MB,
                "worst_rss_per_rank_mb": max(self.peak_rss.values() or [0]) / self.gpus_per_process / MB}


def sample(processes: int, gpus: int, ops: str, sizes: str, env: dict[str, str], interval: float,
           timeout: float = 300) -> Sampled:
    s = Sampled(f"{processes} proc x {gpus} GPU", processes, gpus, load1=loadavg()[0])
    t0 = time.perf_counter()
    p = subprocess.Popen(probe_command(processes, gpus, ops, sizes), cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    watched: Optional[int] = None  # the rank process broken down by mapping
    ranks: list[int] = []
    while p.poll() is None:
        if time.perf_counter() - t0 > timeout:
            p.kill()
            sys.exit(f"benchmarks: probe {s.config} ran past {timeout} s")
        if len(ranks) < processes:  # MPI starts the ranks a little after mpiexec
            ranks = sorted(q for q in descendants(p.pid) if is_rank(q))
        total = 0
        for q in ranks:
            r = rollup(q)
            if r is None:
                continue
            pss, rss = r
            total += pss
            s.pss_samples.setdefault(q, []).append(pss)
            if pss > s.peak_pss.get(q, 0):
                s.peak_pss[q] = pss
                if watched is None:
                    watched = q
                if q == watched:  # a new peak of the watched process: what is it made of?
                    b = breakdown(q)
                    if b and sum(b.values()) >= sum(s.breakdown.values()):
                        s.breakdown = b
            s.peak_rss[q] = max(s.peak_rss.get(q, 0), rss)
        s.peak_sum_pss = max(s.peak_sum_pss, total)
        s.samples += 1
        time.sleep(interval)
    s.wall_s = time.perf_counter() - t0
    err = p.stderr.read().decode() if p.stderr else ""
    if p.returncode != 0:
        sys.exit(f"benchmarks: probe {s.config} failed ({p.returncode}):\n{err[-2000:]}")
    if len(s.peak_pss) != processes:
        sys.exit(f"benchmarks: sampled {len(s.peak_pss)} rank processes of {processes} "
                 f"(the run was too short for {interval * 1000:.0f} ms sampling?)")
    return s


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per configuration (median; default 3)")
    ap.add_argument("--ops", default="allreduce", help="probe operations (default allreduce)")
    ap.add_argument("--sizes", default="1M", help="probe sizes (default 1M)")
    ap.add_argument("--configs", default="8x1,1x8", help="PROCESSESxGPUS list (default 8x1,1x8)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="extra environment for the probe (repeatable)")
    ap.add_argument("--interval-ms", type=float, default=50.0, help="sampling period (default 50)")
    ap.add_argument("--no-snapshot", action="store_true",
                    help="use ncclsim/lib in place instead of a private copy taken at start")
    ap.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    args = ap.parse_args(argv)
    configs = parse_configs(args.configs)

    info = machine()
    runs: dict[tuple[int, int], list[Sampled]] = {c: [] for c in configs}
    with temp_dir("mem") as tmp:
        t = Path(tmp)
        lib = None if args.no_snapshot else snapshot_libs(t / "lib")
        env = {**sim_env(t / "cfg", gpus=max(p * g for p, g in configs), lib_dir=lib),
               **dict(kv.split("=", 1) for kv in args.env)}
        for i in range(args.runs):
            for c in configs:
                s = sample(c[0], c[1], args.ops, args.sizes, env, args.interval_ms / 1000)
                runs[c].append(s)
                m = s.per_rank_mb()
                print(f"  run {i + 1}/{args.runs} {s.config:<16} worst rank {m['worst_rank_mb']:6.1f} MB"
                      f"  mean {m['mean_rank_mb']:6.1f} MB  total {m['total_peak_mb']:7.1f} MB"
                      f"  ({s.samples} samples, {s.wall_s:.1f} s, load {s.load1})", file=sys.stderr)

    rows, results = [], []
    for c, rs in runs.items():
        med = {k: median(r.per_rank_mb()[k] for r in rs) for k in rs[0].per_rank_mb()}
        met = med["worst_rank_mb"] <= AIM_MB
        met_sustained = med["worst_rank_sustained_mb"] <= AIM_MB
        rows.append([rs[0].config, f"{med['worst_rank_mb']:.1f}", f"{med['worst_rank_sustained_mb']:.1f}",
                     f"{med['mean_rank_mb']:.1f}",
                     f"{med['sum_peak_per_rank_mb']:.1f}", f"{med['total_peak_mb']:.1f}",
                     f"{med['worst_rss_per_rank_mb']:.1f}", ("yes" if met else "NO") + " / " + ("yes" if met_sustained else "NO"),
                     f"{median(r.load1 for r in rs):.1f}"])
        results.append({"config": rs[0].config, "median": {k: round(v, 2) for k, v in med.items()},
                        "aim_met_at_peak": met, "aim_met_sustained": met_sustained,
                        "runs": [{**{k: v for k, v in asdict(r).items() if k not in ("peak_pss", "peak_rss", "pss_samples")},
                                  "peak_pss_by_pid": list(r.peak_pss.values()),
                                  "per_rank_mb": {k: round(v, 2) for k, v in r.per_rank_mb().items()}}
                                 for r in rs]})
    print(f"{info['date_utc']}  {info['cpus']} CPUs ({info['cpu_model']}), {info['memory_gib']} GiB, "
          f"commit {info['commit']}; probe --ops {args.ops} --sizes {args.sizes}; median of {args.runs} runs;"
          f" MB = 10^6 bytes; aim <= {AIM_MB:.0f} MB PSS per rank" + (f"; env {' '.join(args.env)}" if args.env else ""))
    print(table(["config", "PSS/rank peak, worst rank", "PSS/rank sustained, worst rank", "PSS/rank peak, mean", "peak sum/ranks", "peak total PSS",
                 "RSS/rank peak, worst rank", "aim met (peak / sustained)", "load1"], rows))
    for c, rs in runs.items():
        b = rs[-1].breakdown
        if not b:
            continue
        div = c[1]
        print(f"\nPSS of one rank process of {rs[-1].config} at its peak ({sum(b.values()) / div / MB:.1f} MB per rank),"
              " by mapping (last run; MB per rank):")
        print(table(["mapping", "MB"], [[k, f"{v / div / MB:.1f}"] for k, v in
                                        sorted(b.items(), key=lambda kv: -kv[1]) if v >= 0.05 * MB * div]))
    write_json(args.json, {"benchmark": "memory", "machine": info, "ops": args.ops, "sizes": args.sizes,
                           "interval_ms": args.interval_ms, "env": args.env, "aim_mb_per_rank": AIM_MB,
                           "loadavg_end": loadavg(), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
