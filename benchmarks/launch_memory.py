#!/usr/bin/env python3
"""The machine's memory through one `ncclsim launch` (the default probe), and
how a setting changes it.

Runs `ncclsim launch --hosts H --gpus 8 --gpus-per-process G` once per variant
(and round), alternating the variants so that both see the same hours of the
machine, and samples /proc/meminfo every second meanwhile. Per run:

* status, wall time, NCCL's init as the probe reports it;
* anonymous memory (AnonPages) when the probe reports its init, and at the
  peak; shared memory (Shmem) at the peak; the least memory available; the
  most swap in use;
* which of the probe's sizes ran (a size is left out when memory is short).

A variant is a name and the variables it sets, e.g.
`--variant shared: --variant unshared:NCCLSIM_SHARED_PAGES=` (sharing of
NCCL's identical allocations on, as launch sets it, and off).

    python benchmarks/launch_memory.py --hosts 64 --gpus-per-process 8 \\
        --variant shared: --variant unshared:NCCLSIM_SHARED_PAGES= [--rounds 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, cpu_loop_s, machine, ncclsim_exe, table, write_json  # noqa: E402

from ncclsim.meminfo import meminfo  # noqa: E402

MB = 1 << 20
INIT = re.compile(r"ncclsim probe: initialised \d+ ranks .* in ([\d.]+) s")
LEFT_OUT = re.compile(r"ncclsim probe: sizes from (\d+) B left out")
CHECKED = re.compile(r"ncclsim probe: \w+ +(\d+) B +checked")


def meminfo_mb() -> dict[str, float]:
    return {k: v / MB for k, v in meminfo().items()}


@dataclass
class Run:
    variant: str
    status: int = 0
    seconds: float = 0.0
    init_s: Optional[float] = None
    anon_at_init_mb: Optional[float] = None
    anon_peak_mb: float = 0.0
    shmem_peak_mb: float = 0.0
    available_least_mb: float = float("inf")
    swap_peak_mb: float = 0.0
    sizes_run: list[int] = field(default_factory=list)
    first_left_out: Optional[int] = None


def one(variant: str, settings: dict[str, str], hosts: int, gpus_per_process: int, base_env: dict[str, str]) -> Run:
    run = Run(variant)
    start = meminfo_mb()
    swap_start = start["SwapTotal"] - start["SwapFree"]
    with tempfile.TemporaryDirectory(prefix="ncclsim-bench-") as tmp:
        cmd = [ncclsim_exe(), "launch", "--hosts", str(hosts), "--gpus", "8",
               "--gpus-per-process", str(gpus_per_process), "--run-dir", str(Path(tmp) / "run")]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**base_env, **settings}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)  # the probe's lines and launch's
        done = threading.Event()

        def sample() -> None:
            while not done.wait(1.0):
                m = meminfo_mb()
                run.anon_peak_mb = max(run.anon_peak_mb, m["AnonPages"])
                run.shmem_peak_mb = max(run.shmem_peak_mb, m["Shmem"])
                run.available_least_mb = min(run.available_least_mb, m["MemAvailable"])
                run.swap_peak_mb = max(run.swap_peak_mb, m["SwapTotal"] - m["SwapFree"] - swap_start)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        assert proc.stdout is not None
        for line in proc.stdout:
            if (m := INIT.search(line)):
                run.init_s = float(m.group(1))
                run.anon_at_init_mb = meminfo_mb()["AnonPages"]
            elif (m := CHECKED.search(line)):
                run.sizes_run.append(int(m.group(1)))
            elif (m := LEFT_OUT.search(line)):
                run.first_left_out = int(m.group(1))
        run.status = proc.wait()
        run.seconds = round(time.monotonic() - t0, 1)
        done.set()
        sampler.join()
    return run


def gb(mb: Optional[float]) -> str:
    return "-" if mb is None else f"{mb / 1024:.1f}"


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition(":")
    settings = dict(item.split("=", 1) for item in rest.split(",") if item)
    return name, settings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--gpus-per-process", type=int, default=8)
    ap.add_argument("--variant", action="append", default=[], help="NAME:VAR=VALUE,... (repeatable)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    variants = [parse_variant(v) for v in args.variant] or [("default", {})]
    base_env = dict(os.environ)
    info = {**machine(), "cpu_loop_s": cpu_loop_s(), "hosts": args.hosts, "gpus_per_process": args.gpus_per_process}
    print(f"# {info}")
    runs = []
    for _ in range(args.rounds):
        for name, settings in variants:
            r = one(name, settings, args.hosts, args.gpus_per_process, base_env)
            print(f"# {asdict(r)}", flush=True)
            runs.append(r)
    print(table(["variant", "status", "s", "init s", "anon at init GB", "anon peak GB", "shmem peak GB",
                 "least available GB", "swap peak GB", "sizes run"],
                [[r.variant, r.status, r.seconds, r.init_s, gb(r.anon_at_init_mb), gb(r.anon_peak_mb),
                  gb(r.shmem_peak_mb), gb(r.available_least_mb), gb(r.swap_peak_mb),
                  ",".join(map(str, r.sizes_run))] for r in runs]))
    write_json(args.json, {"machine": info, "runs": [asdict(r) for r in runs]})
    return 0 if all(r.status == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
