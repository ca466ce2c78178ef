"""Running the points of a sweep through `ncclsim launch`, several at a time."""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from ncclsim import stop_signals
from ncclsim.paths import ncclsim_command
from ncclsim.sweep.expect import AnyExpectation
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

    @property
    def result(self) -> str:
        return "ok" if self.ok and not self.violations else "violated" if self.ok else "failed"

    def to_json(self) -> dict[str, object]:
        return {"point": self.point.to_json(), "name": self.point.name, "run_dir": str(self.run_dir),
                "ok": self.ok, "wall_seconds": round(self.wall, 2), "metrics": self.metrics,
                "violations": self.violations, "error": self.error}


def launch_command(p: Point, run_dir: Path, timeout: float, command: Sequence[str],
                   launch_args: Sequence[str] = ()) -> list[str]:
    """`launch_args`: options every run gets (--clock ...)."""
    cmd = [*ncclsim_command(), "launch", "--preset", p.preset, "--hosts", str(p.hosts),
           "--nccl", p.nccl, "--run-dir", str(run_dir), *launch_args]
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


class Stop:
    """A sweep stopped by a signal (Ctrl-C, a CI job's SIGTERM): the launches
    running get the same signal, so each stops its ranks and cleans up, and
    the points not started yet are not run."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[str]] = set()

    def handle(self, signum: int, frame: object = None) -> None:
        with self._lock:
            self.signum = self.signum or signum
            running = list(self._running)
        for proc in running:
            proc.send_signal(signum)

    def start(self, args: list[str], env: dict[str, str]) -> Optional[subprocess.Popen[str]]:
        """The launch, started and watched; None once the sweep is stopped."""
        with self._lock:
            if self.signum is not None:
                return None
            proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            self._running.add(proc)
            return proc

    def finished(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._running.discard(proc)


def run_point(p: Point, run_dir: Path, timeout: float, command: Sequence[str],
              environ: Mapping[str, str], expectations: Sequence[AnyExpectation], stop: Stop,
              launch_args: Sequence[str] = ()) -> Outcome:
    t = time.monotonic()
    proc = stop.start(launch_command(p, run_dir, timeout, command, launch_args), {**environ, **dict(p.env)})
    if proc is None:
        return Outcome(p, run_dir, 0.0, collect(run_dir), error="not run: the sweep was stopped")
    try:
        stdout, stderr = proc.communicate()
    finally:
        stop.finished(proc)
    wall = time.monotonic() - t
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "launch.stdout").write_text(stdout)
    (run_dir / "launch.stderr").write_text(stderr)
    out = Outcome(p, run_dir, wall, collect(run_dir))
    if proc.returncode != 0:
        out.metrics["ok"] = 0
        out.metrics.setdefault("status", proc.returncode)
        out.error = _failure(stderr)
    out.violations = [v for v in (e.violation(out.metrics) for e in expectations) if v]
    return out


def run_all(points: Sequence[Point], out_dir: Path, jobs: int, timeout: float, command: Sequence[str],
            environ: Mapping[str, str], expectations: Sequence[AnyExpectation],
            stop: Stop, progress: Optional[Callable[[int, Outcome], None]] = None,
            launch_args: Sequence[str] = ()) -> list[Outcome]:
    """Every point, `jobs` at a time; results in the points' order. `stop`
    receives the stop signals meanwhile."""
    results: dict[int, Outcome] = {}
    with stop_signals.handled_by(stop.handle), ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_point, p, out_dir / p.name, timeout, command, environ, expectations,
                               stop, launch_args): i for i, p in enumerate(points)}
        for f in as_completed(futures):
            results[futures[f]] = f.result()
            if progress:
                progress(len(results), results[futures[f]])
    return [results[i] for i in range(len(points))]
