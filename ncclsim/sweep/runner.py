"""Running the points of a sweep through `ncclsim launch`, several at a time."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from ncclsim.sweep.expect import Expectation
from ncclsim.sweep.matrix import Point
from ncclsim.sweep.metrics import Value, collect


@dataclass
class Outcome:
    point: Point
    run_dir: Path
    wall: float
    metrics: dict[str, Value]
    violations: list[str] = field(default_factory=list)
    error: str = ""  # why the run failed (launch's last line), "" when it did not

    @property
    def ok(self) -> bool:
        return self.metrics.get("ok") == 1

    def to_json(self) -> dict[str, object]:
        return {"point": self.point.to_json(), "name": self.point.name, "run_dir": str(self.run_dir),
                "ok": self.ok, "wall_seconds": round(self.wall, 2), "metrics": self.metrics,
                "violations": self.violations, "error": self.error}


def launch_command(p: Point, run_dir: Path, timeout: float, command: Sequence[str]) -> list[str]:
    cmd = [sys.executable, "-m", "ncclsim", "launch", "--preset", p.preset, "--hosts", str(p.hosts),
           "--nccl", p.nccl, "--run-dir", str(run_dir)]
    if p.gpus:
        cmd += ["--gpus", str(p.gpus)]
    if timeout:
        cmd += ["--timeout", f"{timeout:g}"]
    return cmd + (["--", *command] if command else [])


def _failure(stderr: str) -> str:
    """launch's own account of a failure: its error lines, else its last line."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line or "exited with" in line or "killed by" in line
              or "timed out" in line]
    return (errors or lines or ["no output"])[0][:300]


def run_point(p: Point, run_dir: Path, timeout: float, command: Sequence[str],
              environ: Mapping[str, str], expectations: Sequence[Expectation]) -> Outcome:
    t = time.monotonic()
    proc = subprocess.run(launch_command(p, run_dir, timeout, command), env={**environ, **dict(p.env)},
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "launch.stdout").write_text(proc.stdout)
    (run_dir / "launch.stderr").write_text(proc.stderr)
    out = Outcome(p, run_dir, wall, collect(run_dir))
    if proc.returncode != 0:
        out.metrics["ok"] = 0
        out.metrics.setdefault("status", proc.returncode)
        out.error = _failure(proc.stderr)
    out.violations = [v for v in (e.violation(out.metrics) for e in expectations) if v]
    return out


def run_all(points: Sequence[Point], out_dir: Path, jobs: int, timeout: float, command: Sequence[str],
            environ: Mapping[str, str], expectations: Sequence[Expectation],
            progress: Optional[Callable[[int, Outcome], None]] = None) -> list[Outcome]:
    """Every point, `jobs` at a time; results in the points' order."""
    results: dict[int, Outcome] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_point, p, out_dir / p.name, timeout, command, environ, expectations): i
                   for i, p in enumerate(points)}
        for f in as_completed(futures):
            results[futures[f]] = f.result()
            if progress:
                progress(len(results), results[futures[f]])
    return [results[i] for i in range(len(points))]
