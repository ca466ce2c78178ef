"""What /proc/self/status says of this process and its threads, for the
workloads that measure it (they run as scripts: this directory is on their
path)."""

from __future__ import annotations

import os


def status_kib(field: str) -> int:
    """The value of `field` (VmRSS, RssShmem, ...) in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def threads_total(name: str, field: str) -> int:
    """The sum of `field` (voluntary_ctxt_switches, ...) over this process's
    threads whose name starts with `name`."""
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if not f.read().startswith(name):
                    continue
            with open(f"/proc/self/task/{tid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return total
