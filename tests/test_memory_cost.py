"""Simulated memory costs host memory only where a program wrote data:
allocations are free until touched, and zeroing takes no pages (those the
program wrote are zeroed in place, the others stay unallocated)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = """
import ctypes, json
rt = ctypes.CDLL("libcudart.so.12")
def rss_mb():
    return int([l for l in open("/proc/self/status") if l.startswith("VmRSS")][0].split()[1]) // 1024
GiB = 1 << 30
p = ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(GiB)) == 0
before = rss_mb()
assert rt.cudaMemset(p, 0xab, ctypes.c_size_t(64 << 20)) == 0   # written: costs its pages
written = rss_mb()
assert rt.cudaMemset(p, 0, ctypes.c_size_t(GiB)) == 0           # zeroed: no pages taken
zeroed = rss_mb()
assert rt.cudaMemset(ctypes.c_void_p(p.value + 3), 0x5a, ctypes.c_size_t(5)) == 0
out = (ctypes.c_ubyte * 16)()
assert rt.cudaMemcpy(out, p, 16, 2) == 0
tail = (ctypes.c_ubyte * 16)()
assert rt.cudaMemcpy(tail, ctypes.c_void_p(p.value + GiB - 16), 16, 2) == 0
print(json.dumps({"before": before, "written": written, "zeroed": zeroed,
                  "head": list(out), "tail": list(tail)}))
"""


@pytest.mark.parametrize("preload", [True, False], ids=["host-library", "driver-alone"])
def test_zeroing_takes_no_memory(sim_env, preload: bool) -> None:
    """The driver zeroes device memory itself (holes in its files) and, under
    the host library, through its memset: the same pages either way."""
    env = sim_env(gpus=1)
    if not preload:
        env.pop("LD_PRELOAD", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["written"] - r["before"] >= 60        # the 64 MiB really were written
    assert abs(r["zeroed"] - r["written"]) < 16    # zeroing 1 GiB took no more (nor freed those)
    assert r["head"] == [0, 0, 0] + [0x5A] * 5 + [0] * 8
    assert r["tail"] == [0] * 16
