"""NCCLSIM_TRACE: one JSON-lines file per process recording every driver call;
NCCLSIM_LOG: failures on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import ctypes
rt = ctypes.CDLL("libcudart.so.12")
p = ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(p), 4096) == 0
buf = ctypes.create_string_buffer(b"x" * 64)
assert rt.cudaMemcpy(p, buf, 64, 1) == 0
assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(1 << 50)) == 2  # more than the GPU has
print("ok")
"""


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                          timeout=60)


def test_trace_records_every_call(sim_env, tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.mkdir()
    proc = _run({**sim_env(gpus=2), "NCCLSIM_TRACE": str(trace)})
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr
    files = list(trace.glob("trace-ncclsim-h0-*.jsonl"))
    assert len(files) == 1, list(trace.iterdir())
    records = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert all({"t_us", "tid", "result", "args"} <= r.keys() for r in records)
    calls = [r for r in records if "call" in r]
    names = [r["call"] for r in calls]
    assert names[0].startswith("cuGetProcAddress") and "cuInit" in names
    allocs = [r for r in calls if r["call"] == "cuMemAlloc_v2"]
    assert allocs[0]["result"] == 0 and allocs[0]["args"]["bytes"] == 4096
    assert allocs[-1]["result"] == 2 and allocs[-1]["args"]["bytes"] == 1 << 50
    copies = [r for r in calls if r["call"].startswith("cuMemcpy")]
    assert copies and copies[0]["args"]["bytes"] == 64
    times = [r["t_us"] for r in records]
    assert times == sorted(times)


def test_log_level_two_reports_failures(sim_env) -> None:
    quiet = _run(sim_env(gpus=1))
    assert quiet.returncode == 0 and quiet.stderr == ""
    loud = _run({**sim_env(gpus=1), "NCCLSIM_LOG": "2"})
    assert loud.returncode == 0
    failed = [line for line in loud.stderr.splitlines() if "cuMemAlloc_v2(" in line]
    assert len(failed) == 1 and failed[0].endswith("-> 2"), loud.stderr[-2000:]
