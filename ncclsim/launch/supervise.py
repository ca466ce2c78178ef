"""Run the ranks through mpiexec and watch them: rank 0's output live,
progress (ranks initialised), the first failure, a timeout; then stop
everything and clean up."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Optional, TextIO

from ncclsim import stop_signals
from ncclsim.launch import cleanup
from ncclsim.launch.memory_guard import MemoryGuard
from ncclsim.rundir import RankFiles, RunDir

# The main loop looks every POLL seconds while something happens (rank 0
# writes, a rank initialises) and backs off to IDLE_POLL while nothing does:
# each look reads every rank's status file and its wrapper's /proc entry,
# CPU taken from the ranks it watches (benchmarks/README.md, "What watching
# a run costs the ranks"). With many ranks a look itself is long (~0.08 s of
# CPU for 1,024 processes during init): the wait after it is then LOOK_SHARE
# times as long, so that watching never takes more than about a twentieth of
# a CPU.
POLL = 0.2
IDLE_POLL = 1.0
LOOK_SHARE = 20
FAILURE_GRACE = 2.0  # let other ranks report their own failures before stopping them
TIMEOUT_STATUS = 124  # as timeout(1)
MEMORY_STATUS = 1  # the memory guard stopped the run
# mpiexec and the ranks run this much nicer than the launcher: with hundreds
# of busy rank processes on a few cores, a launcher of equal weight gets a
# turn every few hundred milliseconds, and its memory guard would see memory
# run out (0.5 GB/s at 128 x 8) only after the kernel had.
RANKS_NICE = 10


def _schedule_as_ranks() -> None:
    """In mpiexec's process before it starts (the ranks inherit it): nicer
    than the launcher, and SCHED_BATCH. A simulated collective is a chain of
    hand-offs between rank threads (an emulated GPU writes a peer's step and
    wakes it, then sleeps waiting for the next); a woken thread of the normal
    policy often preempts its waker just before the waker would have slept,
    and the waker then needs another turn: a switch more per hand-off on a
    machine where every switch is shared by all ranks (8 x 8 on 2 cores:
    ~230 switches per 8-byte AllReduce, ~190 as batch). A batch thread does
    not preempt on waking (it runs when its CPU's thread sleeps or its slice
    ends); what runs, and the bytes it moves, are unchanged. Any user may
    choose this policy."""
    os.nice(RANKS_NICE)
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        pass  # not Linux: the normal policy


@dataclass
class RankOutcome:
    rank: int
    host: int
    status: Optional[int]  # None: did not finish (stopped by the launcher)


@dataclass
class Outcome:
    status: int
    ranks: list[RankOutcome]
    initialised: int
    seconds: float
    timed_out: bool = False
    mpiexec_status: Optional[int] = None
    killed: list[int] = field(default_factory=list)
    lost: dict[int, int] = field(default_factory=dict)  # rank -> pid of a wrapper killed from outside
    leftovers_removed: list[Path] = field(default_factory=list)  # cleanup.LEFTOVER_PLACES
    stopped_by: Optional[int] = None  # the signal that stopped the launch itself
    memory_low: Optional[str] = None  # why the memory guard stopped the run


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _SignalStop:
    """Ctrl-C, a job scheduler's SIGTERM or a closed terminal stop the ranks
    like a failure does, rather than leaving them running: the first such
    signal raises _Stopped in the watch loop; once `hold()` is called (the
    cleanup has begun) signals are only recorded, so that a second Ctrl-C
    cannot cut the cleanup short."""

    def __init__(self) -> None:
        self.received: Optional[int] = None
        self.holding = False

    def handle(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum
        if not self.holding:
            self.holding = True
            raise _Stopped(signum)

    def hold(self) -> None:
        self.holding = True


class _ExitWait:
    """Sleeps until a child process ends or a timeout passes. Popen.wait(timeout)
    wakes every 50 ms to ask; a pidfd (Linux 5.3 on) sleeps until it ends."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        try:
            self.fd: Optional[int] = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self.fd = None

    def wait(self, timeout: float) -> None:
        if self.fd is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        else:
            select.select([self.fd], [], [], timeout)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class _Follower:
    """Reads what a growing file gained since last time."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def read(self) -> bytes:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return b""
        chunks = []
        try:
            while chunk := os.pread(fd, 1 << 20, self.offset):
                chunks.append(chunk)
                self.offset += len(chunk)
        except OSError:
            pass
        finally:
            os.close(fd)
        return b"".join(chunks)


class _Progress:
    """Counts ranks of which an NCCL log (one per NCCL process) says Init COMPLETE."""

    def __init__(self, ranks: list[RankFiles]) -> None:
        self.ranks = ranks
        self.logs: list[dict[Path, _Follower]] = [{} for _ in ranks]
        self.tails: dict[Path, bytes] = {}
        self.done = [False] * len(ranks)

    def update(self) -> int:
        for r, files in enumerate(self.ranks):
            if self.done[r]:
                continue
            for path in files.nccl_logs():
                log = self.logs[r].setdefault(path, _Follower(path))
                data = self.tails.get(path, b"") + log.read()
                if b"Init COMPLETE" in data:
                    self.done[r] = True
                    break
                self.tails[path] = data[-64:]
        return sum(self.done)


class _Wrappers:
    """Ranks whose wrapper (rank.sh) is gone without writing an exit status:
    killed from outside. MPI would wait for such a rank for ever."""

    def __init__(self, run: RunDir, ranks: list[RankFiles]) -> None:
        self.ranks = ranks
        self.name = run.rank_script.name[:15]  # as the kernel names the process (comm)
        self.machine = Path("/proc/sys/kernel/hostname").read_text().strip()  # as rank.sh records it
        self.pids: dict[int, Optional[int]] = {}  # rank -> its wrapper's pid; None: on another machine
        self.ended: set[int] = set()
        self.lost: dict[int, int] = {}  # rank -> pid of its wrapper

    def check(self) -> list[int]:
        """The ranks lost so far (only this machine's can be seen)."""
        for r, files in enumerate(self.ranks):
            if r in self.lost or r in self.ended:
                continue
            if r not in self.pids:
                pid, machine = files.wrapper_pid(), files.machine_name()
                if pid is None or machine is None:
                    continue  # not started yet
                self.pids[r] = pid if machine == self.machine else None
            pid = self.pids[r]
            if pid is None or self._alive(pid):
                continue
            if files.status() is None:  # read after the death: it did not end by itself
                self.lost[r] = pid
            else:
                self.ended.add(r)
        return sorted(self.lost)

    def kill_now(self) -> None:
        """SIGKILL the process group of every wrapper of this machine still
        running (MPICH's proxy starts each in a session of its own, with its
        program): found from the run directory and /proc/<pid>/stat, not by
        reading every process's environment, which waits on the process's
        memory map and, on a machine out of memory, takes minutes."""
        for files in self.ranks:
            pid = files.wrapper_pid()
            if pid is None or files.machine_name() != self.machine or files.status() is not None:
                continue
            if self._alive(pid):
                try:
                    if os.getpgid(pid) == pid:
                        os.killpg(pid, signal.SIGKILL)
                    else:  # another MPI's wrapper in its parent's group: the program goes with it
                        os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def _alive(self, pid: int) -> bool:
        """`pid` is a wrapper that has not ended: a process named as the script
        (the kernel's comm), not a zombie."""
        found = cleanup.name_and_state(pid)
        return found is not None and found[0] == self.name and found[1] != "Z"


def next_wait(poll: float, look: float, left: Optional[float]) -> float:
    """Seconds to wait after a look that took `look` seconds of CPU: `poll`,
    or LOOK_SHARE times the look when that is longer, never past the
    timeout `left` seconds away."""
    wait = max(poll, LOOK_SHARE * look)
    return max(0.0, min(wait, left)) if left is not None else wait


def supervise(command: list[str], env: dict[str, str], run: RunDir, run_id: str, nranks: int,
              ranks_per_host: int, timeout: float, out: TextIO = sys.stdout,
              err: TextIO = sys.stderr, unit: str = "ranks", guard: Optional[MemoryGuard] = None) -> Outcome:
    """`nranks` processes (MPI ranks); `unit` names them in progress lines
    ("ranks", or "processes" when each drives several NCCL ranks); `guard`
    stops them while this machine still has some memory left."""
    leftovers_before = cleanup.leftover_snapshot()
    start = time.monotonic()
    mpi_log = open(run.mpiexec_log, "wb")
    proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=mpi_log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_schedule_as_ranks)
    rank_files = [run.rank(r) for r in range(nranks)]
    rank0 = _Follower(rank_files[0].stdout)
    progress = _Progress(rank_files)
    wrappers = _Wrappers(run, rank_files)
    shown = -1
    first_failure: Optional[float] = None
    timed_out = False
    stop = _SignalStop()
    poll = POLL
    exit_wait = _ExitWait(proc)
    if guard:  # at once, without grace: the ranks would go on taking memory
        guard.watch(wrappers.kill_now)
    with stop_signals.handled_by(stop.handle):
        try:
            while True:
                look_began = time.thread_time()
                chunk = rank0.read()
                if chunk:
                    out.write(chunk.decode(errors="replace"))
                    out.flush()
                n = progress.update()
                poll = POLL if chunk or n != shown else min(IDLE_POLL, 2 * poll)
                if n != shown:
                    shown = n
                    err.write(f"ncclsim: {n}/{nranks} {unit} initialised\n")
                    err.flush()
                # Read before the ranks' files: a run mpiexec ended (it aborts the
                # job when a rank's process dies) is looked at once more.
                ended = proc.poll() is not None
                failed = [r for r, files in enumerate(rank_files) if (files.status() or 0) != 0]
                if first_failure is None:  # later losses follow from the first failure (mpiexec's abort)
                    failed += wrappers.check()
                if ended:
                    break
                if failed and first_failure is None:
                    first_failure = time.monotonic()
                    poll = POLL
                if first_failure is not None and time.monotonic() - first_failure > FAILURE_GRACE:
                    break
                if timeout and time.monotonic() - start > timeout:
                    timed_out = True
                    break
                if guard and guard.tripped:
                    break
                left = start + timeout - time.monotonic() if timeout else None
                exit_wait.wait(next_wait(poll, time.thread_time() - look_began, left))  # back at once when mpiexec ends
        except _Stopped as e:
            err.write(f"ncclsim: stopped by {stop_signals.name(e.signum)}; stopping every rank\n")
        finally:
            stop.hold()
            exit_wait.close()
            if guard:
                guard.close()
            killed, removed, mpi_status = _finish(proc, run_id, mpi_log, rank0, out, leftovers_before)
    stopped_by = stop.received
    memory_low = guard.tripped if guard else None

    ranks = [RankOutcome(r, r // ranks_per_host, files.status()) for r, files in enumerate(rank_files)]
    statuses = [o.status for o in ranks]
    if stopped_by is not None:
        status = 128 + stopped_by
    elif timed_out:
        status = TIMEOUT_STATUS
    elif memory_low:
        status = MEMORY_STATUS
    elif any(s for s in statuses if s):
        status = max(s for s in statuses if s)
    elif any(s is None for s in statuses):
        status = mpi_status if mpi_status and mpi_status > 0 else 1
    else:
        status = 0
    return Outcome(status, ranks, progress.update(), time.monotonic() - start, timed_out, mpi_status,
                   killed, wrappers.lost, removed, stopped_by, memory_low)


def _finish(proc: subprocess.Popen, run_id: str, mpi_log: BinaryIO, rank0: _Follower, out: TextIO,
            leftovers_before: set[Path]) -> tuple[list[int], list[Path], int]:
    """Stop every process of the run, show the rest of rank 0's output,
    remove the shared files it left: (killed pids, removed files, mpiexec's status)."""
    killed = cleanup.kill_run(run_id)
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
    mpi_status = proc.wait()
    mpi_log.close()
    out.write(rank0.read().decode(errors="replace"))
    out.flush()
    return killed, cleanup.remove_new(leftovers_before), mpi_status
