"""What /proc/self/status says of this process's memory, for the workloads
that measure it (they run as scripts: this directory is on their path)."""

from __future__ import annotations


def status_kib(field: str) -> int:
    """The value of `field` (VmRSS, RssShmem, ...) in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")
