#!/usr/bin/env python3
"""What one look of `ncclsim launch` at its ranks costs, by the number of ranks.

While a run goes on, the launcher looks at every rank again and again: the
new part of each NCCL log (has it initialised?), its exit status, whether its
wrapper still runs. That is CPU taken from the ranks it watches. This builds
a run directory of N ranks as a run in NCCL's init has it (a 2 KB log each,
no exit status, every wrapper alive: one process named as rank.sh stands for
all of them), looks with the launcher's own code, and reports the CPU of one
look (median) and the wait the launcher takes after it.

    python benchmarks/launcher_look.py [--ranks 64,256,1024] [--looks 15] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, median, table, temp_dir, write_json  # noqa: E402

from ncclsim import rundir  # noqa: E402
from ncclsim.launch import supervise  # noqa: E402


def one_look(ranks: list[rundir.RankFiles], progress: supervise._Progress, wrappers: supervise._Wrappers) -> float:
    """CPU seconds of one look, the parts the launcher's loop reads."""
    began = time.thread_time()
    progress.update()
    [r for r, files in enumerate(ranks) if (files.status() or 0) != 0]
    wrappers.check()
    return time.thread_time() - began


def measure(base: Path, nranks: int, looks: int, wrapper_pid: int) -> float:
    run = rundir.create(base / f"run-{nranks}", nranks, max(1, nranks // 8))
    host = socket.gethostname()
    ranks = [run.rank(r) for r in range(nranks)]
    for r, files in enumerate(ranks):
        files.machine.write_text(host + "\n")
        files.pid.write_text(f"{wrapper_pid}\n")
        (files.directory / f"nccl.{100000 + r}.log").write_bytes(b"x" * 2048)
    progress, wrappers = supervise._Progress(ranks), supervise._Wrappers(run, ranks)
    wrappers.machine = host
    cost = median(one_look(ranks, progress, wrappers) for _ in range(looks))
    shutil.rmtree(run.root)
    return cost


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="64,256,1024", help="rank counts, comma-separated")
    ap.add_argument("--looks", type=int, default=15, help="looks per count (the median is reported)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    counts = [int(n) for n in args.ranks.split(",")]
    rows, results = [], []
    with temp_dir("look") as tmp:
        stand_in = Path(tmp) / rundir.RANK_SCRIPT  # the kernel names the process after it, as a wrapper
        shutil.copy(shutil.which("sleep") or "/bin/sleep", stand_in)
        wrapper = subprocess.Popen([str(stand_in), "600"])
        try:
            for n in counts:
                look = measure(Path(tmp), n, args.looks, wrapper.pid)
                after_change = supervise.next_wait(supervise.POLL, look, None)
                idle = supervise.next_wait(supervise.IDLE_POLL, look, None)
                rows.append([n, f"{1e3 * look:.1f}", f"{after_change:.2f}", f"{idle:.2f}",
                             f"{100 * look / (look + idle):.1f}"])
                results.append({"ranks": n, "look_cpu_s": look, "wait_after_change_s": after_change,
                                "wait_idle_s": idle})
        finally:
            wrapper.kill()
            wrapper.wait()
    print(table(["ranks", "a look, ms of CPU", "wait after a change, s", "wait while idle, s",
                 "CPU share while idle, %"], rows))
    write_json(args.json, {"machine": machine(), "pid": os.getpid(), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
