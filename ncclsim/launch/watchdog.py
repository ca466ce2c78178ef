"""Ranks stop when their launch is gone. `ncclsim launch` starts this process
beside the run, in a session of its own, holding the write end of its stdin:

    python -m ncclsim.launch.watchdog RUN_DIR RUN_ID

A launch that ends normally writes "done" and closes the pipe. End of file
without it means the launch died (even by SIGKILL, which it cannot handle):
the watchdog then stops every process of the run on this machine (mpiexec
included, whose proxies then stop the ranks of other machines) and removes
the shared memory the run created, and says so in the run directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from ncclsim.launch import cleanup
from ncclsim.rundir import RunDir

DONE = b"done"


def start(run: RunDir, run_id: str) -> subprocess.Popen[bytes]:
    """The watchdog of this launch (it outlives it)."""
    env = {k: v for k, v in os.environ.items() if k != cleanup.RUN_ID}  # or it would stop itself
    proc = subprocess.Popen([sys.executable, "-m", "ncclsim.launch.watchdog", str(run.root), run_id],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env, start_new_session=True,
                            cwd=run.root)  # not the caller's: a source checkout there would shadow ncclsim
    assert proc.stdout is not None
    proc.stdout.readline()  # ready: it knows the shared memory there was before the run
    proc.stdout.close()
    return proc


def release(watchdog: Optional[subprocess.Popen[bytes]]) -> None:
    """The launch has finished its own cleanup: the watchdog leaves without acting."""
    if watchdog is None or watchdog.stdin is None:
        return
    try:
        watchdog.stdin.write(DONE)
        watchdog.stdin.close()
    except OSError:
        pass  # already gone
    watchdog.wait()


def main(argv: list[str]) -> int:
    run, run_id = RunDir(Path(argv[0])), argv[1]
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # a terminal's Ctrl-C is the launch's to handle
    before = cleanup.leftover_snapshot()
    sys.stdout.write("ready\n")
    sys.stdout.close()
    said = sys.stdin.buffer.read()  # until the launch writes DONE or is gone
    if said == DONE:
        return 0
    stopped = cleanup.kill_run(run_id)
    removed = cleanup.remove_new(before)
    line = (f"{time.strftime('%Y-%m-%d %H:%M:%S')} the launch ended before its run: stopped "
            f"{len(stopped)} process(es), removed {cleanup.describe(removed)}\n")
    try:
        with open(run.watchdog_log, "a") as f:
            f.write(line)
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
