"""Shared helpers of the benchmark scripts (not a benchmark itself).

The scripts run from anywhere: they start the probe with the interpreter that
runs them (`sys.executable`), in the repository root, so `python -m ncclsim`
imports this source tree, and MPI's `mpiexec` is the one beside that
interpreter (the venv's).
"""

from __future__ import annotations

import json
import re
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from ncclsim.meminfo import meminfo  # the interpreter's ncclsim

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
HOST_PRELOAD = "libncclsim-host.so"  # preloaded by `ncclsim env`, `launch` and `probe`


def mpiexec() -> str:
    """The mpiexec beside the interpreter (the venv's MPICH), else the one on PATH."""
    beside = Path(PYTHON).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if not found:
        sys.exit("benchmarks: no mpiexec beside the interpreter nor on PATH")
    return found


def loadavg() -> tuple[float, float, float]:
    a, b, c = os.getloadavg()
    return (round(a, 2), round(b, 2), round(c, 2))


def cpu_loop_s() -> float:
    """Seconds one core takes for a fixed piece of Python work (the best of 3):
    a virtual machine's speed varies from hour to hour with what else its host
    runs (this one's by up to 2x), and figures of different runs compare only
    with it beside them."""
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        sum(range(10_000_000))
        best = min(best, time.perf_counter() - t)
    return round(best, 3)


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    return {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpus": os.cpu_count(), "cpu_model": model,
            "memory_gib": round(meminfo().get("MemTotal", 0) / 2**30, 1), "kernel": platform.release(),
            "python": platform.python_version(), "commit": commit or "?",
            "loadavg_start": loadavg(), "cpu_loop_s": cpu_loop_s()}


def sim_env(config_dir: Path, gpus: int = 8, lib_dir: Optional[Path] = None,
            host_preload: bool = True) -> dict[str, str]:
    """os.environ plus what `ncclsim env` exports (one simulated host of `gpus` H100s).

    lib_dir, when given, goes first on LD_LIBRARY_PATH: a private copy of the
    built libraries, so that a rebuild of ncclsim/lib during a measurement
    does not change what is measured; LD_PRELOAD's host library
    (libncclsim-host.so) is then taken from that copy too.

    host_preload=False removes LD_PRELOAD altogether: the process runs
    without the product's host library (NCCL's empty socket polls then spin
    instead of yielding the CPU), to measure what that library changes."""
    out = subprocess.run([PYTHON, "-m", "ncclsim", "env", "--json", "--gpus", str(gpus),
                          "--config-dir", str(config_dir)],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"benchmarks: `ncclsim env` failed: {out.stderr.strip()}")
    data = json.loads(out.stdout)
    env = dict(os.environ)
    for k in data.get("unset", []):
        env.pop(k, None)
    env.update(data["env"])
    if lib_dir is not None:
        env["LD_LIBRARY_PATH"] = f"{lib_dir}:{env['LD_LIBRARY_PATH']}"
        preload = env.get("LD_PRELOAD", "").split()
        env["LD_PRELOAD"] = " ".join(str(lib_dir / Path(x).name) if Path(x).name == HOST_PRELOAD else x
                                     for x in preload)
    if not host_preload:
        env.pop("LD_PRELOAD", None)
    elif HOST_PRELOAD not in env.get("LD_PRELOAD", ""):
        sys.exit(f"benchmarks: `ncclsim env` did not preload {HOST_PRELOAD}: an older ncclsim?")
    # Start every measurement from the same state: no tracing, no debug output.
    for k in ("NCCLSIM_TRACE", "NCCLSIM_LOG", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"):
        env.pop(k, None)
    return env


def parse_configs(text: str) -> list[tuple[int, int]]:
    """"8x1,1x8" -> [(8, 1), (1, 8)]: processes x GPUs per process."""
    out = []
    for item in text.split(","):
        p, sep, g = item.strip().lower().partition("x")
        if not sep or not p.isdigit() or not g.isdigit() or int(p) < 1 or int(g) < 1:
            sys.exit(f"benchmarks: not a configuration PROCESSESxGPUS: {item!r}")
        out.append((int(p), int(g)))
    return out


def probe_command(processes: int, gpus_per_process: int, ops: str, sizes: str,
                  json_out: Optional[Path] = None) -> list[str]:
    cmd = [PYTHON, "-m", "ncclsim.probe", "--gpus-per-process", str(gpus_per_process),
           "--ops", ops, "--sizes", sizes]
    if json_out is not None:
        cmd += ["--json", str(json_out)]
    if processes > 1:
        cmd = [mpiexec(), "-n", str(processes)] + cmd
    return cmd


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy since boot, all CPUs
    (/proc/stat: user, nice, system, irq, softirq; not idle, iowait, steal)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


@dataclass
class Timed:
    wall_s: float
    user_s: float   # CPU time of the child processes (all of them, MPI's included)
    sys_s: float
    stdout: str
    stderr: str
    others_s: float = float("nan")  # CPU the rest of the machine used meanwhile (other work)


def run_timed(cmd: Sequence[str], env: dict[str, str], timeout: float = 600) -> Timed:
    """Run to completion; wall time and the children's CPU time (getrusage), and
    the CPU time the rest of the machine used during the run: the machine's busy
    time (/proc/stat) less the children's and this process's, i.e. other work
    competing for the CPUs (the load average lags by a minute and counts the
    previous run's processes)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s0 = resource.getrusage(resource.RUSAGE_SELF)
    m0 = machine_busy_s()
    t0 = time.perf_counter()
    p = subprocess.run(list(cmd), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    m1 = machine_busy_s()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s1 = resource.getrusage(resource.RUSAGE_SELF)
    if p.returncode != 0:
        sys.exit(f"benchmarks: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    ours = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
            + s1.ru_utime - s0.ru_utime + s1.ru_stime - s0.ru_stime)
    return Timed(wall, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime, p.stdout, p.stderr,
                 max(0.0, (m1 - m0) - ours))


def median(values: Iterable[float]) -> float:
    v = list(values)
    return statistics.median(v) if v else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table (readable as plain text too)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    def line(r: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) + " |"
    sep = "|" + "|".join("-" * (w + 1) + (":" if i else "-") for i, w in enumerate(widths)) + "|"
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def write_json(path: Optional[Path], data: dict[str, Any]) -> None:
    if path is not None:
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {path}")


def temp_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix=f"ncclsim-bench-{prefix}-")


def snapshot_libs(dest: Path) -> Path:
    """Copy ncclsim/lib to dest (see sim_env's lib_dir)."""
    src = ROOT / "ncclsim" / "lib"
    if not (src / "libcuda.so.1").exists():
        sys.exit(f"benchmarks: {src}/libcuda.so.1 missing: build it first (fake_cuda/build.py --out ncclsim/lib)")
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file():
            shutil.copy2(f, dest / f.name)
    return dest

KIB = 1024


def rollup(pid: int) -> Optional[tuple[int, int]]:
    """(PSS, RSS) in bytes, None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    pss = re.search(r"^Pss:\s+(\d+) kB", text, re.M)
    rss = re.search(r"^Rss:\s+(\d+) kB", text, re.M)
    if not pss or not rss:
        return None
    return int(pss.group(1)) * KIB, int(rss.group(1)) * KIB


# ---- launch measurements (launch_time.py, perf_sweep.py) ----

def ncclsim_exe() -> str:
    """The console script beside this interpreter: `launch` takes its libraries from the package."""
    exe = Path(PYTHON).parent / "ncclsim"
    if not exe.exists():
        sys.exit(f"benchmarks: {exe} missing: run with the interpreter of an environment where "
                 "ncclsim is installed (e.g. /tmp/venv/bin/python)")
    return str(exe)


def raise_priority() -> bool:
    """The sampler competes with up to 64 busy rank processes for 2 cores; at
    normal priority it then samples every ~1.5 s instead of every 100 ms.
    Root may raise its priority (nice -10); the launch goes back to 0."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
        return True
    except OSError:
        return False


def normal_priority() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    except OSError:
        pass


def ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def environ_of(pid: int) -> Optional[list[bytes]]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None


def scan_run(members: dict[int, bool], not_ours: set[int], launch_pid: int,
             belongs: Callable[[list[bytes]], Optional[bool]], is_rank: Callable[[int], bool]) -> None:
    """Add the processes of a launch that appeared since the last scan to
    `members` (pid -> is a rank process). `belongs(environ)`: True for the
    run's, False for another's, None when it cannot tell yet. A process that is
    not the run's is remembered in `not_ours`, unless it is launch's child,
    which carries the run's environment only once it execs."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid in members or pid in not_ours:
            continue
        env = environ_of(pid)
        verdict = belongs(env) if env is not None else None
        if verdict:
            members[pid] = is_rank(pid)
        elif verdict is False and ppid(pid) != launch_pid:
            not_ours.add(pid)

