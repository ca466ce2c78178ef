"""Stopping a run before this machine runs out of memory.

Without it, a shape too large for the machine ends in the kernel's
out-of-memory killer: first minutes of thrashing (the programs' own code
pages are what is left to evict), then a process picked by size, which need
not be the run's. The guard watches what the kernel could still hand out
(memory available plus free swap) and stops every rank itself while some is
left, saying how much was left."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

from ncclsim.launch.options import LaunchError
from ncclsim.meminfo import capacity, meminfo, room

# What the guard keeps free by default: 5 % of the machine's memory, at least
# 1 GiB. 128 x 8 with a process per host, no swap, 24 GiB: at the end memory
# available fell by 0.5 GB/s, from 1.3 GB to none in 3 s.
KEEP_FREE_SHARE = 0.05
KEEP_FREE_MIN = 1 << 30
# How often the guard's thread looks: soon enough that memory in use rising
# as fast as this machine can fill fresh pages cannot pass the limit in
# between, at most every WATCH_MIN_INTERVAL and at least every
# WATCH_MAX_INTERVAL (a look is ~0.13 ms of CPU: at 20 a second, ~1 % of a
# core taken from the ranks). FILL_RATE_PER_CPU is about three times what
# one core of a 2-vCPU Xeon VM wrote into fresh anonymous pages (mmap,
# memset: 1.45 GB/s; 2.6 GB/s with both cores); NCCL's fastest measured
# rise, 128 x 8 on a 2-vCPU EPYC VM, was 0.66 GB/s (benchmarks/README.md,
# "Memory at 128 x 8").
FILL_RATE_PER_CPU = 4e9  # bytes per second
WATCH_MIN_INTERVAL = 0.05
WATCH_MAX_INTERVAL = 1.0


def next_look(left: int, keep_free: int, cpus: int) -> float:
    """Seconds until the guard must look again, `left` bytes being available now."""
    rise = FILL_RATE_PER_CPU * max(cpus, 1)
    return min(WATCH_MAX_INTERVAL, max(WATCH_MIN_INTERVAL, (left - keep_free) / rise))


def default_keep_free(total: int) -> int:
    return max(KEEP_FREE_MIN, int(KEEP_FREE_SHARE * total))


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


@dataclass
class MemoryGuard:
    keep_free: int  # bytes; 0: never stop
    in_use_at_start: int  # memory and swap in use when the run started
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)  # how fast memory can fill (next_look)
    tripped: Optional[str] = field(default=None, init=False)  # why it stopped the run
    _done: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: Optional[threading.Thread] = field(default=None, init=False)

    @staticmethod
    def start(keep_free: Optional[int]) -> Optional["MemoryGuard"]:
        """The guard for a run about to start (None where /proc/meminfo does not
        tell); `keep_free` None: the default for this machine. A machine already
        below it refuses the run."""
        fields = meminfo()
        left = room(fields)
        if left is None or keep_free == 0:
            return None
        keep = default_keep_free(fields["MemTotal"]) if keep_free is None else keep_free
        if left < keep:
            raise LaunchError(f"this machine has {_gb(left)} of memory available (free swap included), "
                              f"less than the {_gb(keep)} a run keeps free (--keep-free)")
        return MemoryGuard(keep, capacity(fields) - left)

    def watch(self, stop_run: Callable[[], object]) -> None:
        """Look from a thread of its own, which calls `stop_run` at once when
        memory runs low: the launcher's main loop (reading every rank's logs)
        can take seconds per pass on a loaded machine, and memory does not wait."""
        def loop() -> None:
            wait = WATCH_MIN_INTERVAL
            while not self._done.wait(wait):
                why, wait = self.look()
                if why:
                    self.tripped = why
                    stop_run()
                    return
        self._thread = threading.Thread(target=loop, name="memory guard", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread:
            self._thread.join()

    def look(self) -> tuple[Optional[str], float]:
        """(why the run must stop now, or None while enough is free; seconds
        until the next look)."""
        fields = meminfo()
        left = room(fields)
        if left is None:
            return None, WATCH_MAX_INTERVAL
        if left >= self.keep_free:
            return None, next_look(left, self.keep_free, self.cpus)
        swap = f"{_gb(fields['SwapTotal'])} of swap" if fields.get("SwapTotal") else "no swap"
        return (f"this machine is nearly out of memory ({_gb(left)} left of {_gb(fields['MemTotal'])} "
                f"and {swap}, {_gb(capacity(fields) - left - self.in_use_at_start)} more in use than at "
                f"the start; --keep-free {_gb(self.keep_free)})"), 0.0
