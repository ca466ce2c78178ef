#!/usr/bin/env python3
"""PyTorch ranks on simulated hosts: start-up time and memory per rank.

Runs `ncclsim launch --hosts H --gpus G -- PYTHON tests/workloads/torch_job.py
--no-checks --train ddp` (a small transformer LM, 3 DDP steps; `--fsdp` for FSDP) with PYTHON from an
environment holding torch (default: the one tests/test_torch.py keeps in
~/.cache/ncclsim/torch-env-*), and samples every 100 ms the PSS
(/proc/<pid>/smaps_rollup) of each torch rank process of the run (found by the
run directory in its environment). Reports the launch's wall time, each
rank's time from the launch's start to its process group (`init` printed by
the workload) and to its last step, the peak PSS per rank (worst and mean) and
of all ranks together, and the machine's memory left at the peak.

    python benchmarks/torch_ranks.py [--configs 2x2,2x8] [--fsdp] [--python PATH] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from ncclsim.meminfo import meminfo  # the interpreter's ncclsim

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (loadavg, machine, ncclsim_exe, parse_configs, rollup, ROOT, scan_run,  # noqa: E402
                    table, temp_dir, write_json)

MB = 1e6
WORKLOAD = ROOT / "tests" / "workloads" / "torch_job.py"


def default_python() -> Optional[Path]:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ncclsim"
    found = sorted(cache.glob("torch-env-*/bin/python"))
    return found[-1] if found else None


def is_rank(pid: int) -> bool:
    """A torch process running the workload (not rank.sh, whose arguments name it too)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return len(argv) > 1 and argv[1] == str(WORKLOAD).encode()


def available_mb() -> float:
    available = meminfo().get("MemAvailable")
    return available / MB if available is not None else float("nan")


@dataclass
class Run:
    hosts: int
    gpus: int
    wall_s: float
    first_init_s: float  # launch start -> the first rank's process group
    last_init_s: float
    last_step_s: float  # launch start -> the last rank's third step
    worst_rank_pss_mb: float
    mean_rank_pss_mb: float
    peak_all_ranks_pss_mb: float
    min_available_mb: float
    status: int


def run_once(python: Path, hosts: int, gpus: int, fsdp: bool, run_dir: Path) -> Run:
    cmd = [ncclsim_exe(), "launch", "--hosts", str(hosts), "--gpus", str(gpus), "--run-dir", str(run_dir),
           "--timeout", "1800", "--", str(python), str(WORKLOAD), "--no-checks", "--train", "fsdp" if fsdp else "ddp"]
    marker = b"NCCLSIM_RUN_DIR=" + str(run_dir.resolve()).encode()
    members: dict[int, bool] = {}
    not_ours: set[int] = set()
    peaks: dict[int, int] = {}
    peak_all, min_avail = 0, float("inf")
    t0 = time.time()
    with open(run_dir.parent / f"{run_dir.name}.out", "wb") as log:
        p = subprocess.Popen(cmd, cwd=run_dir.parent, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        while p.poll() is None:
            scan_run(members, not_ours, p.pid, lambda env: marker in env, is_rank)
            total = 0
            for pid, ranked in list(members.items()):
                r = rollup(pid) if ranked else None
                if r:
                    peaks[pid] = max(peaks.get(pid, 0), r[0])
                    total += r[0]
            peak_all = max(peak_all, total)
            min_avail = min(min_avail, available_mb())
            time.sleep(0.1)
    wall = time.time() - t0
    inits, steps = [], []
    for out in sorted(run_dir.glob("ranks/*/stdout")):
        for m in re.finditer(r"rank \d+: (init|\w+ step 2 done) at ([\d.]+)", out.read_text()):
            (inits if m.group(1) == "init" else steps).append(float(m.group(2)) - t0)
    values = list(peaks.values()) or [0]
    return Run(hosts, gpus, round(wall, 1), round(min(inits, default=float("nan")), 1),
               round(max(inits, default=float("nan")), 1), round(max(steps, default=float("nan")), 1),
               round(max(values) / MB, 1), round(sum(values) / len(values) / MB, 1), round(peak_all / MB, 1),
               round(min_avail, 0), p.returncode)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="2x2,2x8", help="HOSTSxGPUS,... (default 2x2,2x8)")
    ap.add_argument("--fsdp", action="store_true", help="train with FSDP instead of DDP")
    ap.add_argument("--python", type=Path, default=default_python(), help="python of an environment with torch")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.python is None or not args.python.exists():
        sys.exit("benchmarks: no environment with torch: give --python (tests/test_torch.py makes one)")
    runs = []
    with temp_dir("ncclsim-torch-bench-") as tmp:
        for hosts, gpus in parse_configs(args.configs):
            print(f"{hosts} x {gpus} ...", file=sys.stderr, flush=True)
            runs.append(run_once(args.python, hosts, gpus, args.fsdp, Path(tmp) / f"{hosts}x{gpus}"))
    print(f"load1 {loadavg()[0]:.1f}; {'FSDP' if args.fsdp else 'DDP'}, 3 steps\n")
    print(table(["hosts x GPUs", "wall s", "first / last rank's process group, s", "last rank's 3rd step, s",
                 "PSS/rank peak, worst / mean MB", "all ranks peak PSS MB", "memory left at least MB",
                 "status"],
                [[f"{r.hosts} x {r.gpus}", r.wall_s, f"{r.first_init_s} / {r.last_init_s}", r.last_step_s,
                  f"{r.worst_rank_pss_mb} / {r.mean_rank_pss_mb}", r.peak_all_ranks_pss_mb, r.min_available_mb,
                  r.status] for r in runs]))
    write_json(args.json, {"machine": machine(), "runs": [asdict(r) for r in runs]})
    return 0 if all(r.status == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
