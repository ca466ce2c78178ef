"""Leave nothing behind: every process of a run (found by the run id in its
environment, so processes that escaped mpiexec's process group are found
too) and the shared-memory segments the run created.

On a run spread over several machines, the launcher runs this module on
each of them afterwards: `python -m ncclsim.launch.cleanup RUN_ID SINCE`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

SHM = Path("/dev/shm")


RUN_ID = "NCCLSIM_RUN_ID"  # in every process of a run (launch.environment)
LAUNCH_PID = "NCCLSIM_LAUNCH_PID"  # the launch that started it
RUN_DIR = "NCCLSIM_RUN_DIR"  # its run directory


def environments() -> dict[int, dict[str, str]]:
    """The ncclsim variables of every process of a run on this machine (pid -> name -> value)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if RUN_ID.encode() not in env:
            continue
        pairs = (item.decode(errors="replace").partition("=") for item in env.split(b"\0"))
        variables = {k: v for k, _, v in pairs if k.startswith("NCCLSIM_")}
        if RUN_ID in variables:
            found[int(entry.name)] = variables
    return found


def run_processes(run_id: str) -> list[int]:
    """PIDs whose environment carries NCCLSIM_RUN_ID=run_id."""
    return [pid for pid, env in environments().items() if env.get(RUN_ID) == run_id]


def kill_run(run_id: str, grace: float = 2.0) -> list[int]:
    """SIGTERM, then SIGKILL whatever is left after `grace` seconds."""
    return kill_all(lambda: run_processes(run_id), grace)


def kill_all(find: Callable[[], list[int]], grace: float = 2.0) -> list[int]:
    """SIGTERM what `find` finds, then SIGKILL whatever is left after `grace` seconds."""
    victims = find()
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 1.0)):
        pids = find()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and find():
            time.sleep(0.05)
    # A killed process leaves the list as its environment goes, before its
    # mappings do: wait for them too, or its shared memory looks still in use.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and any(running(pid) for pid in victims):
        time.sleep(0.02)
    return victims


def running(pid: int) -> bool:
    """The process exists and has not ended (a zombie has: it holds no memory)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def shm_snapshot() -> set[str]:
    try:
        return {p.name for p in SHM.iterdir()}
    except OSError:
        return set()


def _open_by_anyone(names: Iterable[str]) -> set[str]:
    wanted = {str(SHM / n) for n in names}
    used = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target in wanted:
                    used.add(Path(target).name)
            maps = (proc / "maps").read_text()
        except OSError:
            continue
        used.update(Path(w).name for w in wanted if w in maps)
    return used


SHM_PREFIXES = ("nccl", "ncclsim", "mpich_shm")


def remove_new_shm(before: set[str]) -> list[str]:
    """Segments NCCL or the simulator created during the run that no live
    process uses any more (a killed rank cannot unlink its own)."""
    return _remove_unused([n for n in shm_snapshot() - before if n.startswith(SHM_PREFIXES)])


def remove_shm_since(since: float) -> list[str]:
    """As remove_new_shm, on a machine where no snapshot was taken: the
    segments created at or after `since` (seconds since the epoch)."""
    new = []
    for name in shm_snapshot():
        try:
            if name.startswith(SHM_PREFIXES) and (SHM / name).stat().st_ctime >= since:
                new.append(name)
        except OSError:
            pass
    return _remove_unused(new)


def remove_unused_shm() -> list[str]:
    """Every segment of NCCL, MPI or the simulator that no live process uses
    (what runs whose processes are all gone left behind)."""
    return _remove_unused([n for n in shm_snapshot() if n.startswith(SHM_PREFIXES)])


def _remove_unused(new: list[str]) -> list[str]:
    busy = _open_by_anyone(new)
    removed = []
    for name in new:
        if name not in busy:
            try:
                (SHM / name).unlink()
                removed.append(name)
            except OSError:
                pass
    return removed


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m ncclsim.launch.cleanup",
                                 description="Stop a run's processes and remove its shared memory "
                                             "on this machine.")
    ap.add_argument("run_id")
    ap.add_argument("since", type=float, help="when the run started (seconds since the epoch)")
    args = ap.parse_args(argv)
    killed = kill_run(args.run_id)
    removed = remove_shm_since(args.since)
    print(f"{os.uname().nodename}: {len(killed)} process(es) stopped, {len(removed)} shared-memory "
          f"segment(s) removed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
