"""What NVLS changes on dgx-h100: NCCL's algorithm per AllReduce size, and what
its NVLS buffers cost the simulation (init time, memory).

For each shape (1 x 8, 2 x 8) the probe runs AllReduce over a range of sizes
twice: with NVLS off (NCCL_NVLS_ENABLE=0: what ncclsim did before it had
multicast) and as NCCL chooses. Printed: the algorithm/protocol per size in
both runs; NCCL's init time (rank 0's `Init timings` total and the slowest
rank's), launch's wall time, the peak PSS of the rank processes and the
/dev/shm the run allocated, and the NVLS memory NCCL reports
(`NVLS comm ... nvlsTotalSize`, per rank).

    .venv/bin/python benchmarks/nvls_cost.py [--sizes 8,64K,1M,4M,16M,64M] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PYTHON, machine, ncclsim_exe, normal_priority, table, temp_dir, write_json  # noqa: E402
from launch_time import RunSampler, init_timings  # noqa: E402

from ncclsim.rundir import RunDir  # noqa: E402

MB = 1 << 20
NVLS_COMM = re.compile(r"NVLS comm \S+ headRank (-?\d+) nHeads (\d+) .*?nvlsTotalSize (\d+)")
SHAPES = ((1, 8), (2, 8))
VARIANTS = (("NVLS off", {"NCCL_NVLS_ENABLE": "0"}), ("NCCL's choice", {}))


def run(hosts: int, gpus: int, sizes: str, env_extra: dict[str, str], run_dir: Path) -> dict[str, Any]:
    cmd = [ncclsim_exe(), "launch", "--hosts", str(hosts), "--gpus", str(gpus), "--run-dir", str(run_dir),
           "--timeout", "600", "--", PYTHON, "-m", "ncclsim.probe", "--ops", "allreduce", "--sizes", sizes]
    sampler = RunSampler(run_dir)
    t0 = time.perf_counter()
    with open(run_dir.parent / f"{run_dir.name}.out", "wb") as log:
        p = subprocess.Popen(cmd, cwd=run_dir.parent, stdout=log, stderr=subprocess.STDOUT,
                             env={**os.environ, **env_extra}, stdin=subprocess.DEVNULL, preexec_fn=normal_priority)
        sampler.launch_pid = p.pid
        while p.poll() is None:
            sampler.sample()
            time.sleep(0.1)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        out = (run_dir.parent / f"{run_dir.name}.out").read_text(errors="replace")
        sys.exit(f"benchmarks: {' '.join(cmd)} failed ({p.returncode}):\n{out[-3000:]}")
    report = json.loads(RunDir(run_dir).run_json.read_text())
    total0, _, slowest = init_timings(run_dir, hosts * gpus)
    log0 = "".join(f.read_text(errors="replace") for f in RunDir(run_dir).rank(0).nccl_logs())
    nvls = NVLS_COMM.search(log0)
    return {
        "algorithms": {str(t["bytes"]): f"{t['algorithm']}/{t['protocol']}" for t in report["tuning"]
                       if t["collective"] == "AllReduce"},
        "nvls_channels": report["nvls"]["channels"], "nvls_heads": report["nvls"].get("heads"),
        "wall_s": round(wall, 2), "nccl_init_s": total0, "nccl_init_slowest_s": slowest,
        "peak_ranks_pss_mb": round(sampler.peak_ranks_pss / MB, 1),
        "peak_new_shm_mb": round(sampler.peak_shm / MB, 1),
        "nvls_total_mb_per_rank": round(int(nvls.group(3)) / MB, 1) if nvls else 0.0,
    }


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="8,64K,1M,4M,16M,64M")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    with temp_dir("ncclsim-nvls-") as tmp:
        for hosts, gpus in SHAPES:
            for name, env_extra in VARIANTS:
                key = f"{hosts}x{gpus} {name}"
                print(f"benchmarks: {key} ...", file=sys.stderr, flush=True)
                results[key] = run(hosts, gpus, args.sizes, env_extra, Path(tmp) / key.replace(" ", "-"))
    sizes = list(next(iter(results.values()))["algorithms"])
    print(table(["AllReduce bytes", *results], [[s, *(r["algorithms"].get(s, "?") for r in results.values())]
                                                 for s in sizes]))
    print()
    rows = [[k, r["nvls_channels"], r["nvls_total_mb_per_rank"], r["nccl_init_s"], r["nccl_init_slowest_s"],
             r["wall_s"], r["peak_ranks_pss_mb"], r["peak_new_shm_mb"]] for k, r in results.items()]
    print(table(["run", "NVLS channels", "NVLS MiB/rank (NCCL)", "init s (rank 0)", "init s (slowest)",
                 "launch wall s", "peak PSS MB (ranks)", "new /dev/shm MB"], rows))
    write_json(args.json, {"machine": machine(), "sizes": args.sizes, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
