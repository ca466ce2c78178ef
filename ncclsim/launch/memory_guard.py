"""Stopping a run before this machine runs out of memory.

Without it, a shape too large for the machine ends in the kernel's
out-of-memory killer: first minutes of thrashing (the programs' own code
pages are what is left to evict), then a process picked by size, which need
not be the run's. The guard watches what the kernel could still hand out
(memory available plus free swap) and stops every rank itself while some is
left, saying how far the run got."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ncclsim.launch.options import LaunchError
from ncclsim.meminfo import meminfo

# What the guard keeps free by default: 3 % of the machine's memory, at least
# 512 MiB. The supervisor looks every 0.2 s, and a run's ranks zeroing fresh
# pages (NCCL's buffers) take up to a few hundred MB in that time on two cores.
KEEP_FREE_SHARE = 0.03
KEEP_FREE_MIN = 512 << 20


def default_keep_free(total: int) -> int:
    return max(KEEP_FREE_MIN, int(KEEP_FREE_SHARE * total))


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


@dataclass
class MemoryGuard:
    keep_free: int  # bytes; 0: never stop
    in_use_at_start: int  # memory and swap in use when the run started

    @staticmethod
    def start(keep_free: Optional[int]) -> Optional["MemoryGuard"]:
        """The guard for a run about to start (None where /proc/meminfo does not
        tell); `keep_free` None: the default for this machine. A machine already
        below it refuses the run."""
        fields = meminfo()
        room = _room(fields)
        if room is None or keep_free == 0:
            return None
        total = fields["MemTotal"] + fields.get("SwapTotal", 0)
        keep = default_keep_free(fields["MemTotal"]) if keep_free is None else keep_free
        if room < keep:
            raise LaunchError(f"this machine has {_gb(room)} of memory available (free swap included), "
                              f"less than the {_gb(keep)} a run keeps free (--keep-free)")
        return MemoryGuard(keep, total - room)

    def check(self) -> Optional[str]:
        """Why the run must stop now, or None while enough is free."""
        fields = meminfo()
        room = _room(fields)
        if room is None or room >= self.keep_free:
            return None
        total = fields["MemTotal"] + fields.get("SwapTotal", 0)
        swap = f"{_gb(fields['SwapTotal'])} of swap" if fields.get("SwapTotal") else "no swap"
        return (f"this machine is nearly out of memory ({_gb(room)} left of {_gb(fields['MemTotal'])} "
                f"and {swap}, {_gb(total - room - self.in_use_at_start)} more in use than at the start; "
                f"--keep-free {_gb(self.keep_free)})")


def _room(fields: dict[str, int]) -> Optional[int]:
    """What the kernel can still hand out: memory available and swap free."""
    if "MemAvailable" not in fields or "MemTotal" not in fields:
        return None
    return fields["MemAvailable"] + fields.get("SwapFree", 0)
