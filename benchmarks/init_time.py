#!/usr/bin/env python3
"""NCCL initialisation time on the simulated platform.

Runs the built-in probe (`python -m ncclsim.probe`, no operations: initialise
and destroy) as 1 process x 8 GPUs and as 8 MPI processes x 1 GPU, N times
each (interleaved), and reports the median of the probe's `init_seconds`
(ncclCommInitRank of every rank, in one group), of the whole command's wall
time (interpreter start, MPI start, init, destroy, exit) and of its CPU time
(user and system, all processes), with the 1-minute load average at the start
of each run and the CPU time the rest of the machine used during the run
("others' CPU": /proc/stat's busy time less the run's, i.e. other work
competing for the CPUs; the load average lags by a minute). The probe runs in the environment of `ncclsim env`, with its
host preload (libncclsim-host.so); --no-host-preload removes LD_PRELOAD, to
measure what that library changes.

    python benchmarks/init_time.py [--runs 3] [--no-host-preload] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (loadavg, machine, median, parse_configs, probe_command, run_timed,  # noqa: E402
                    sim_env, snapshot_libs, table, temp_dir, write_json)


@dataclass
class Config:
    processes: int
    gpus_per_process: int

    @property
    def label(self) -> str:
        return f"{self.processes} proc x {self.gpus_per_process} GPU"


@dataclass
class Run:
    init_s: float
    destroy_s: float
    wall_s: float
    user_s: float
    sys_s: float
    load1: float
    others_s: float = 0.0  # CPU time the rest of the machine used during the run


@dataclass
class Result:
    config: str
    processes: int
    gpus_per_process: int
    nccl_version: str = "?"
    runs: list[Run] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        return {k: round(median(getattr(r, k) for r in self.runs), 3)
                for k in ("init_s", "destroy_s", "wall_s", "user_s", "sys_s", "others_s", "load1")}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per configuration (median; default 3)")
    ap.add_argument("--configs", default="1x8,8x1",
                    help="PROCESSESxGPUS_PER_PROCESS list (default 1x8,8x1)")
    ap.add_argument("--ops", default="", help="probe operations after init (default none)")
    ap.add_argument("--sizes", default="8", help="probe sizes (with --ops)")
    ap.add_argument("--no-host-preload", action="store_true",
                    help="remove LD_PRELOAD (ncclsim's host library) from the probe's environment")
    ap.add_argument("--no-snapshot", action="store_true",
                    help="use ncclsim/lib in place instead of a private copy taken at start")
    ap.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    args = ap.parse_args(argv)
    configs = [Config(p, g) for p, g in parse_configs(args.configs)]

    info = machine()
    results = [Result(c.label, c.processes, c.gpus_per_process) for c in configs]
    with temp_dir("init") as tmp:
        t = Path(tmp)
        lib = None if args.no_snapshot else snapshot_libs(t / "lib")
        env = sim_env(t / "cfg", gpus=max(c.processes * c.gpus_per_process for c in configs), lib_dir=lib,
                      host_preload=not args.no_host_preload)
        for i in range(args.runs):
            for c, res in zip(configs, results):
                out = t / f"probe-{c.processes}x{c.gpus_per_process}-{i}.json"
                load1 = loadavg()[0]
                timed = run_timed(probe_command(c.processes, c.gpus_per_process, args.ops, args.sizes, out), env)
                data = json.loads(out.read_text())
                res.nccl_version = data["nccl_version"]
                run = Run(data["init_seconds"], data["destroy_seconds"], round(timed.wall_s, 3),
                          round(timed.user_s, 3), round(timed.sys_s, 3), load1, round(timed.others_s, 2))
                res.runs.append(run)
                print(f"  run {i + 1}/{args.runs} {c.label:<16} init {run.init_s:6.2f} s  wall {run.wall_s:6.2f} s"
                      f"  user {run.user_s:5.2f} s  sys {run.sys_s:5.2f} s  others {run.others_s:5.2f} s  load {load1}", file=sys.stderr)

    rows = []
    for r in results:
        s = r.summary()
        inits = sorted(x.init_s for x in r.runs)
        rows.append([r.config, r.nccl_version, f"{s['init_s']:.2f}", f"{inits[0]:.2f}..{inits[-1]:.2f}",
                     f"{s['wall_s']:.2f}", f"{s['user_s']:.2f}", f"{s['sys_s']:.2f}", f"{s['others_s']:.2f}",
                     f"{s['load1']:.1f}"])
    print(f"{info['date_utc']}  {info['cpus']} CPUs ({info['cpu_model']}), {info['memory_gib']} GiB, "
          f"commit {info['commit']}; median of {args.runs} runs; ops: {args.ops or 'none (init + destroy)'}; "
          + ("WITHOUT the host preload" if args.no_host_preload else "with the host preload"))
    print(table(["config", "NCCL", "init s (median)", "init s (min..max)", "wall s", "user s", "sys s",
                 "others' CPU s", "load1"], rows))
    write_json(args.json, {"benchmark": "init_time", "machine": info, "runs_per_config": args.runs,
                           "ops": args.ops, "sizes": args.sizes, "host_preload": not args.no_host_preload,
                           "loadavg_end": loadavg(),
                           "results": [{**{k: v for k, v in asdict(r).items() if k != "runs"},
                                        "median": r.summary(), "runs": [asdict(x) for x in r.runs]}
                                       for r in results]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
