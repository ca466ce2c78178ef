"""Leave nothing behind: every process of a run (found by the run id in its
environment, so processes that escaped mpiexec's process group are found
too) and the shared files the run created (LEFTOVER_PLACES).

On a run spread over several machines, the launcher runs this module on
each of them afterwards: `python -m ncclsim.launch.cleanup RUN_ID SINCE`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

from ncclsim.files import read_small

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


def name_and_state(pid: int) -> Optional[tuple[str, str]]:
    """The process's name as the kernel keeps it (comm) and its state letter
    ("Z": a zombie), from /proc/<pid>/stat, which, unlike cmdline, does not
    wait on the process's memory map; None when there is no such process."""
    stat = read_small(f"/proc/{pid}/stat")
    if stat is None:
        return None
    head, _, rest = stat.rpartition(")")  # the name may itself hold ") "
    return head.partition("(")[2], (rest.split() or ["?"])[0]


def running(pid: int) -> bool:
    """The process exists and has not ended (a zombie has: it holds no memory)."""
    found = name_and_state(pid)
    return found is not None and found[1] != "Z"


# What a run may leave behind in shared places: a killed process cannot
# remove its own. NCCL's, MPI's and the simulator's shared-memory segments,
# and the machine's hwloc topology that MPICH's process manager (hydra)
# writes for its ranks to a file of a fixed name in /tmp, which each proxy
# removes only when it ends on its own.
SHM_PREFIXES = ("nccl", "ncclsim", "mpich_shm")
LEFTOVER_PLACES: tuple[tuple[Path, tuple[str, ...], str], ...] = (
    (SHM, SHM_PREFIXES, "shared-memory segment(s)"),
    (Path("/tmp"), ("hydra_hwloc_xmlfile_",), "MPI topology file(s)"),
)


def leftover_snapshot() -> set[Path]:
    """Every file in LEFTOVER_PLACES a run may leave behind, as it is now."""
    found = set()
    for place, prefixes, _ in LEFTOVER_PLACES:
        try:
            found.update(p for p in place.iterdir() if p.name.startswith(prefixes))
        except OSError:
            pass
    return found


def describe(removed: Iterable[Path]) -> str:
    """'2 shared-memory segment(s), 1 MPI topology file(s)' (every kind, 0 too)."""
    removed = list(removed)
    return ", ".join(f"{sum(p.parent == place and p.name.startswith(prefixes) for p in removed)} {what}"
                     for place, prefixes, what in LEFTOVER_PLACES)


def _open_by_anyone(paths: Iterable[Path]) -> set[Path]:
    wanted = {str(p): p for p in paths}
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
                    used.add(wanted[target])
            maps = (proc / "maps").read_text()
        except OSError:
            continue
        used.update(p for w, p in wanted.items() if w in maps)
    return used


def remove_new(before: set[Path]) -> list[Path]:
    """Leftovers the run created that no live process uses any more."""
    return _remove_unused(leftover_snapshot() - before)


def remove_since(since: float) -> list[Path]:
    """As remove_new, on a machine where no snapshot was taken: the
    leftovers created at or after `since` (seconds since the epoch)."""
    new = []
    for path in leftover_snapshot():
        try:
            if path.stat().st_ctime >= since:
                new.append(path)
        except OSError:
            pass
    return _remove_unused(new)


def remove_unused() -> list[Path]:
    """Every leftover that no live process uses (what runs whose processes
    are all gone left behind)."""
    return _remove_unused(leftover_snapshot())


def _remove_unused(new: Iterable[Path]) -> list[Path]:
    new = sorted(new)
    busy = _open_by_anyone(new)
    removed = []
    for path in new:
        if path not in busy:
            try:
                path.unlink()
                removed.append(path)
            except OSError:
                pass
    return removed


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m ncclsim.launch.cleanup",
                                 description="Stop a run's processes and remove the shared memory "
                                             "and temporary files it left on this machine.")
    ap.add_argument("run_id")
    ap.add_argument("since", type=float, help="when the run started (seconds since the epoch)")
    args = ap.parse_args(argv)
    killed = kill_run(args.run_id)
    removed = remove_since(args.since)
    print(f"{os.uname().nodename}: {len(killed)} process(es) stopped; removed {describe(removed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
