#!/usr/bin/env python3
"""Time of each collective in the probe, and the CPU time (user / system) of the run.

Runs the built-in probe with `--ops all --sizes 8,1M` (by default as
1 process x 8 GPUs), N times, and reports the median seconds of each
operation and size as the probe measures it (enqueue on every rank + stream
synchronisation). The first operation of each kind includes NCCL's lazy
connection setup (runtime connect), which is where the time goes on the
simulator; later sizes reuse the connections. The run's wall, user and
system time are the whole command's (all processes); "others' CPU" is the CPU
time the rest of the machine used meanwhile (other work competing for the
CPUs).

--env NAME=VALUE (repeatable) sets a variable for the probe, e.g. an NCCL
tunable, to compare configurations. The probe runs in the environment of
`ncclsim env`, which preloads ncclsim's host library (libncclsim-host.so: an
empty non-blocking recv/accept gives up the CPU); --no-host-preload removes
LD_PRELOAD from that environment, to measure what the library changes (NCCL's
socket polling then spins).

    python benchmarks/ops_time.py [--configs 1x8,8x1] [--runs 3] [--env NCCL_X=1] [--no-host-preload]
                                  [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (loadavg, machine, median, parse_configs, probe_command, run_timed,  # noqa: E402
                    sim_env, snapshot_libs, table, temp_dir, write_json)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per configuration (median; default 3)")
    ap.add_argument("--configs", default="1x8", help="PROCESSESxGPUS list (default 1x8)")
    ap.add_argument("--ops", default="all", help="probe operations (default all)")
    ap.add_argument("--sizes", default="8,1M", help="probe sizes (default 8,1M)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="extra environment for the probe (repeatable)")
    ap.add_argument("--no-host-preload", action="store_true",
                    help="remove LD_PRELOAD (ncclsim's host library) from the probe's environment")
    ap.add_argument("--no-snapshot", action="store_true",
                    help="use ncclsim/lib in place instead of a private copy taken at start")
    ap.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    args = ap.parse_args(argv)
    configs = parse_configs(args.configs)
    extra = dict(kv.split("=", 1) for kv in args.env)

    info = machine()
    runs: dict[tuple[int, int], list[dict[str, Any]]] = {c: [] for c in configs}
    with temp_dir("ops") as tmp:
        t = Path(tmp)
        lib = None if args.no_snapshot else snapshot_libs(t / "lib")
        env = {**sim_env(t / "cfg", gpus=max(p * g for p, g in configs), lib_dir=lib,
                         host_preload=not args.no_host_preload), **extra}
        for i in range(args.runs):
            for c in configs:
                out = t / f"probe-{c[0]}x{c[1]}-{i}.json"
                load1 = loadavg()[0]
                timed = run_timed(probe_command(c[0], c[1], args.ops, args.sizes, out), env)
                data = json.loads(out.read_text())
                runs[c].append({"load1": load1, "wall_s": timed.wall_s, "user_s": timed.user_s,
                                "sys_s": timed.sys_s, "others_s": timed.others_s, "probe": data})
                print(f"  run {i + 1}/{args.runs} {c[0]} proc x {c[1]} GPU: wall {timed.wall_s:6.2f} s"
                      f"  user {timed.user_s:5.2f} s  sys {timed.sys_s:6.2f} s  others {timed.others_s:5.2f} s  load {load1}", file=sys.stderr)

    print(f"{info['date_utc']}  {info['cpus']} CPUs ({info['cpu_model']}), {info['memory_gib']} GiB, "
          f"commit {info['commit']}; median of {args.runs} runs"
          + (f"; env {' '.join(args.env)}" if args.env else "")
          + ("; WITHOUT the host preload (no LD_PRELOAD)" if args.no_host_preload else
             "; with the host preload (libncclsim-host.so)"))
    results = []
    for c, rs in runs.items():
        label = f"{c[0]} proc x {c[1]} GPU"
        ops = [(o["operation"], o["size"]) for o in rs[0]["probe"]["operations"]]
        per_op = {f"{op} {size}": median(next(o["seconds"] for o in r["probe"]["operations"]
                                              if (o["operation"], o["size"]) == (op, size)) for r in rs)
                  for op, size in ops}
        summary = {k: median(r[k] for r in rs) for k in ("wall_s", "user_s", "sys_s", "others_s", "load1")}
        summary["init_s"] = median(r["probe"]["init_seconds"] for r in rs)
        summary["destroy_s"] = median(r["probe"]["destroy_seconds"] for r in rs)
        print(f"\n{label}, NCCL {rs[0]['probe']['nccl_version']}: wall {summary['wall_s']:.2f} s, "
              f"user {summary['user_s']:.2f} s, sys {summary['sys_s']:.2f} s, init {summary['init_s']:.2f} s, "
              f"destroy {summary['destroy_s']:.2f} s, others' CPU {summary['others_s']:.2f} s, load1 {summary['load1']:.1f}")
        print(table(["operation", "bytes", "seconds (median)", "min..max"],
                    [[k.split()[0], k.split()[1], f"{v:.4f}",
                      "{:.4f}..{:.4f}".format(*(lambda xs: (min(xs), max(xs)))(
                          [next(o["seconds"] for o in r["probe"]["operations"]
                                if f"{o['operation']} {o['size']}" == k) for r in rs]))]
                     for k, v in per_op.items()]))
        results.append({"config": label, "median": {k: round(v, 4) for k, v in summary.items()},
                        "operations_median_s": {k: round(v, 6) for k, v in per_op.items()},
                        "runs": rs})
    write_json(args.json, {"benchmark": "ops_time", "machine": info, "ops": args.ops, "sizes": args.sizes,
                           "env": extra, "host_preload": not args.no_host_preload, "loadavg_end": loadavg(), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
