"""The launcher's memory guard: it looks at /proc/meminfo often only while
memory is close to its limit, and says why it stops a run. (Its stopping a
run that fills the memory: test_launch.py, test_a_run_filling_the_memory_is_stopped.)"""

from __future__ import annotations

import pytest

from ncclsim.launch.memory_guard import (FILL_RATE_PER_CPU, WATCH_MAX_INTERVAL, WATCH_MIN_INTERVAL, MemoryGuard,
                                         next_look)
from ncclsim.meminfo import meminfo, room

GB = 10**9


def test_it_looks_sooner_the_closer_memory_is_to_the_limit() -> None:
    keep = 1 * GB
    # Far from the limit: once a second; at the limit: as often as it may.
    assert next_look(keep + 100 * GB, keep, cpus=2) == WATCH_MAX_INTERVAL
    assert next_look(keep, keep, cpus=2) == WATCH_MIN_INTERVAL
    assert next_look(keep - GB, keep, cpus=2) == WATCH_MIN_INTERVAL
    # In between: no sooner than memory filled at the machine's rate could reach it.
    room_left = int(0.5 * FILL_RATE_PER_CPU * 2)  # half a second's fill on two CPUs
    assert next_look(keep + room_left, keep, cpus=2) == pytest.approx(0.5)
    # More CPUs fill memory faster: the guard looks sooner.
    assert next_look(keep + room_left, keep, cpus=8) == pytest.approx(0.125)


def test_a_look_says_why_a_run_must_stop() -> None:
    left = room(meminfo())
    if left is None:
        pytest.skip("no /proc/meminfo")
    why, wait = MemoryGuard(keep_free=left + 100 * GB, in_use_at_start=0).look()
    assert why is not None and why.startswith("this machine is nearly out of memory"), why
    assert why.endswith(f"--keep-free {(left + 100 * GB) / GB:.1f} GB)"), why
    why, wait = MemoryGuard(keep_free=1, in_use_at_start=0).look()
    assert why is None and WATCH_MIN_INTERVAL <= wait <= WATCH_MAX_INTERVAL
