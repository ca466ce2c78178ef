"""What a new user meets first: any working directory, programs built against
the MPI ncclsim installs, processes that die or are killed, a launch that
is itself killed, a run's report that must not pass when its ranks failed,
several NCCL processes per launched rank, a topology file of one's own."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import pytest

import ncclsim
from ncclsim import rundir
from ncclsim.launch import cleanup
from ncclsim.launch.supervise import IDLE_POLL, LOOK_SHARE, POLL, next_wait
from ncclsim.report.exits import CHECK_NAME, exit_check

REPO = Path(__file__).resolve().parents[1]
LONG_PROBE = ("probe", "--ops", "allreduce", "--sizes", "8", "--iters", "1000000")


def _wait_for(what: str, done: Callable[[], bool], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


def _initialised(run: Path, nranks: int) -> bool:
    """Every rank's NCCL log says Init COMPLETE."""
    def done(r: int) -> bool:
        return any("Init COMPLETE" in p.read_text(errors="replace")
                   for p in (run / "ranks" / str(r)).glob("nccl.*.log"))
    return all(done(r) for r in range(nranks))


def _start(ncclsim_exe: Path, env: dict[str, str], cwd: Path, run: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(ncclsim_exe), "launch", "--run-dir", str(run), *args], cwd=cwd, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _initialised_long_run(ncclsim_exe: Path, env: dict[str, str], cwd: Path, run: Path) -> subprocess.Popen[str]:
    """A 2 x 2 launch of a probe that runs for ever, once every rank has initialised."""
    proc = _start(ncclsim_exe, env, cwd, run, "--hosts", "2", "--gpus", "2", "--", str(ncclsim_exe), *LONG_PROBE)
    _wait_for("every rank initialises", lambda: _initialised(run, 4))
    return proc


# ---- any working directory ----

@pytest.fixture
def source_checkout(tmp_path: Path) -> Path:
    """A directory holding ncclsim's Python sources without built libraries,
    as the project's own checkout is before (or without) an in-place build."""
    root = tmp_path / "checkout"
    shutil.copytree(Path(ncclsim.__file__).parent, root / "ncclsim",
                    ignore=shutil.ignore_patterns("lib", "__pycache__"))
    return root


@pytest.mark.e2e
def test_sweep_and_launch_from_a_source_checkout(ncclsim_exe: Path, clean_env: dict[str, str],
                                                 source_checkout: Path) -> None:
    """Their child processes run the installed ncclsim, never the sources of
    the working directory (which have no libcuda.so.1)."""
    proc = subprocess.run([str(ncclsim_exe), "sweep", "--hosts", "1", "--gpus", "2", "--out", "sweep"],
                          cwd=source_checkout, env=clean_env, text=True, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "libcuda.so.1 is missing" not in proc.stdout + proc.stderr
    doc = json.loads((source_checkout / "sweep" / "sweep.json").read_text())
    assert [p["ok"] for p in doc["points"]] == [True], doc
    proc = subprocess.run([str(ncclsim_exe), "launch", "--hosts", "1", "--gpus", "2", "--run-dir", "run"],
                          cwd=source_checkout, env=clean_env, text=True, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"allreduce +16777216 B +checked", proc.stdout), proc.stdout


# ---- programs linked against the installed MPI ----

MPI_HELLO = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("rank %d of %d\n", rank, size);
    MPI_Finalize();
    return 0;
}
"""


@pytest.mark.e2e
def test_a_program_linked_against_the_installed_mpi_finds_it(run_cli, tmp_path: Path) -> None:
    """Built as nccl-tests' MPI=1 builds are: -L to the wheel's libmpi, no run path."""
    prefix = Path(sys.executable).parent.parent
    src = tmp_path / "hello.c"
    src.write_text(MPI_HELLO)
    exe = tmp_path / "hello"
    subprocess.run([os.environ.get("CC", "cc"), f"-I{prefix / 'include'}", str(src), "-o", str(exe),
                    f"-L{prefix / 'lib'}", "-lmpi"], check=True)
    bare = subprocess.run([str(exe)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert "libmpi.so.12" in bare.stderr, "the test program must not find libmpi by itself"
    run = tmp_path / "run"
    proc = run_cli("launch", "--run-dir", str(run), "--hosts", "2", "--gpus", "1", "--", str(exe), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [(run / "ranks" / str(r) / "stdout").read_text() for r in range(2)] == \
        ["rank 0 of 2\n", "rank 1 of 2\n"]


# ---- processes that die, launches that are killed ----

@pytest.mark.e2e
def test_a_killed_rank_wrapper_is_named(ncclsim_exe: Path, clean_env: dict[str, str], leftovers,
                                        tmp_path: Path) -> None:
    """Killing the wrapper mpiexec started (not the program) used to leave the
    other ranks waiting in MPI for ever."""
    run = tmp_path / "run"
    proc = _start(ncclsim_exe, clean_env, tmp_path, run, "--hosts", "2", "--gpus", "2", "--",
                  sys.executable, "-c", "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()")
    pid_file = run / "ranks" / "1" / "pid"
    _wait_for("rank 1 starts", lambda: pid_file.exists() and pid_file.read_text().strip() != "")
    pid = int(pid_file.read_text())
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - killed < 15, "the lost rank was not noticed within seconds"
    assert proc.returncode != 0
    assert f"rank 1 (host 0): its process (rank.sh, pid {pid}) was killed before the program ended" in err, err
    # mpiexec may stop the other ranks' wrappers the same way at once.
    assert 1 in json.loads((run / "launch.json").read_text())["wrappers_killed"]
    leftovers.assert_none(run)


@pytest.mark.e2e
def test_a_wrapper_killed_at_once_is_named(run_cli, leftovers, tmp_path: Path) -> None:
    """mpiexec may end the whole run before the launch looks: the loss is still named."""
    run = tmp_path / "run"
    proc = run_cli("launch", "--run-dir", str(run), "--hosts", "2", "--gpus", "2", "--", "sh", "-c",
                   'if [ "$PMI_RANK" = 1 ]; then kill -9 $PPID; fi; sleep 30', timeout=120)
    assert proc.returncode != 0
    assert "rank 1 (host 0): its process (rank.sh, pid" in proc.stderr, proc.stderr
    assert 1 in json.loads((run / "launch.json").read_text())["wrappers_killed"]
    leftovers.assert_none(run)


@pytest.mark.e2e
def test_a_stopped_run_does_not_pass_its_checks(ncclsim_exe: Path, clean_env: dict[str, str], leftovers,
                                               tmp_path: Path) -> None:
    """NCCL's logs of a run stopped after init look complete; its report must still fail."""
    run = tmp_path / "run"
    proc = _initialised_long_run(ncclsim_exe, clean_env, tmp_path, run)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Checks: 1 of" in out and "FAILED" in out, out
    assert f"{CHECK_NAME}: the launch was stopped by SIGTERM" in out, out
    checks = {c["name"]: c for c in json.loads((run / "run.json").read_text())["checks"]}
    assert checks[CHECK_NAME]["ok"] is False
    assert checks["every rank completed init"]["ok"] is True
    leftovers.assert_none(run)


@pytest.mark.parametrize("launch,status,ok,detail", [
    ({"status": 0, "ranks": [{"rank": 0, "status": 0}, {"rank": 1, "status": 0}]}, None, True, "2 rank(s)"),
    ({"status": 137, "ranks": [{"rank": 0, "status": 0}, {"rank": 1, "status": 137}]}, None, False,
     "rank(s) 1 killed by SIGKILL"),
    ({"status": 124, "timed_out": True, "ranks": [{"rank": 0, "status": 0}, {"rank": 1, "status": None}]},
     None, False, "the launch timed out; rank(s) 1 did not finish"),
    ({"status": 1, "memory_low": "this machine is nearly out of memory (...)",
      "ranks": [{"rank": 0, "status": None}, {"rank": 1, "status": None}]},
     None, False, "the launch stopped the ranks: memory ran low; rank(s) 0-1 did not finish"),
    ({"status": 1, "memory_low": "this machine is nearly out of memory (...)", "wrappers_killed": [0, 1],
      "ranks": [{"rank": 0, "status": None}, {"rank": 1, "status": None}]},
     None, False, "the launch stopped the ranks: memory ran low; rank(s) 0-1 did not finish"),
    ({"status": 1, "wrappers_killed": [3, 1, 2],
      "ranks": [{"rank": r, "status": 0 if r == 0 else None} for r in range(4)]},
     None, False, "rank(s) 1-3: process killed from outside; rank(s) 1-3 did not finish"),
    (None, 3, False, "rank(s) 0 exited with status 3"),
    (None, None, None, None),
])
def test_exit_check(launch: Optional[dict], status: Optional[int], ok: Optional[bool],
                    detail: Optional[str]) -> None:
    from ncclsim.report.model import RankInfo
    ranks = [RankInfo(rank=0, host="ncclsim-h0", hostname="ncclsim-h0", pid=1, device=0, log="l",
                      init_complete=True, nvml_dev=None, busid=None, local_rank=0, exit_status=status)]
    check = exit_check(launch, ranks)
    if ok is None:
        assert check is None
    else:
        assert check is not None and (check.ok, check.detail) == (ok, detail)


def test_launches_started_in_the_same_second_get_run_directories_of_their_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rundir.time, "strftime", lambda fmt: "20261204-001059")
    base = tmp_path / "runs"
    first, second, third = (rundir.default_run_dir(1, 2, base) for _ in range(3))
    other = rundir.default_run_dir(2, 8, base)
    assert [p.name for p in (first, second, third, other)] == [
        "20261204-001059-1x2", "20261204-001059-1x2-2", "20261204-001059-1x2-3", "20261204-001059-2x8"]
    assert all(p.is_dir() and not any(p.iterdir()) for p in (first, second, third, other))
    run = rundir.create(second, 2, 1)  # the launch takes the directory made for it
    assert run.rank(1).directory.is_dir()
    with pytest.raises(ncclsim.NcclsimError, match="exists and is not empty"):
        rundir.create(second, 2, 1)  # an explicit --run-dir in use is still refused
    rundir.remove_if_empty(third)  # taken back, as a sweep stopped by its arguments does
    assert not third.exists() and base.is_dir()


def test_two_launches_given_one_run_directory_at_the_same_moment_do_not_share_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both look before either writes (held together by a barrier): one claims
    the directory, the other is refused with the message of one in use."""
    looked = threading.Barrier(2, timeout=10)
    is_empty = rundir._is_empty

    def look_then_wait(path: Path) -> bool:
        empty = is_empty(path)
        looked.wait()
        return empty

    monkeypatch.setattr(rundir, "_is_empty", look_then_wait)
    target = tmp_path / "shared-run"
    target.mkdir()
    results: list[object] = []

    def launch() -> None:
        try:
            results.append(rundir.create(target, 2, 1))
        except ncclsim.NcclsimError as e:
            results.append(str(e))

    threads = [threading.Thread(target=launch) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(type(r).__name__ for r in results) == ["RunDir", "str"]
    assert f"run directory {target} exists and is not empty: choose another --run-dir" in results


def test_a_run_directory_that_cannot_be_made_is_named_in_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    with pytest.raises(ncclsim.NcclsimError, match=f"^run directory {re.escape(str(a_file))} is not a directory"):
        rundir.create(a_file, 2, 1)
    with pytest.raises(ncclsim.NcclsimError,
                       match=f"^cannot make run directory {re.escape(str(a_file / 'run'))}: Not a directory$"):
        rundir.create(a_file / "run", 2, 1)


def _watchdog_of(run: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"ncclsim.launch.watchdog" in cmd and str(run).encode() in cmd:
                found.append(int(entry.name))
    return found


@pytest.mark.e2e
def test_ranks_stop_when_their_launch_is_killed(ncclsim_exe: Path, clean_env: dict[str, str], leftovers,
                                                tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _initialised_long_run(ncclsim_exe, clean_env, tmp_path, run)
    assert leftovers.processes_in(run)
    proc.kill()
    proc.communicate(timeout=10)
    _wait_for("the ranks stop", lambda: not leftovers.processes_in(run), timeout=30)
    _wait_for("the watchdog leaves", lambda: not _watchdog_of(run), timeout=30)
    assert "the launch ended before its run: stopped" in (run / "watchdog.log").read_text()
    assert leftovers.files() <= leftovers.files_before, leftovers.files() - leftovers.files_before


@pytest.mark.e2e
@pytest.mark.parametrize("target", ["RUN_DIR", "every orphan"])
def test_clean_removes_what_a_dead_launch_left(ncclsim_exe: Path, clean_env: dict[str, str], leftovers,
                                               run_cli, tmp_path: Path, target: str) -> None:
    """A launch killed together with its watchdog leaves ranks running;
    `ncclsim clean` stops them and removes their shared memory and the
    topology files of MPICH's killed proxies."""
    run = tmp_path / "run"
    proc = _initialised_long_run(ncclsim_exe, clean_env, tmp_path, run)
    for pid in _watchdog_of(run):
        os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.communicate(timeout=10)
    time.sleep(2)
    assert leftovers.processes_in(run), "the ranks should outlive a launch killed with its watchdog"
    new = leftovers.files() - leftovers.files_before
    assert any(p.parent == Path("/dev/shm") for p in new), "the run should hold shared memory"
    assert any(p.name.startswith("hydra_hwloc_xmlfile_") for p in new), "MPICH's proxies write the topology"
    done = run_cli("clean", *([str(run)] if target == "RUN_DIR" else []))
    assert done.returncode == 0, done.stderr
    assert "stopped" in done.stdout and "removed" in done.stdout and " 0 process(es)" not in done.stdout, \
        done.stdout
    assert leftovers.processes_in(run) == []
    assert leftovers.files() <= leftovers.files_before, leftovers.files() - leftovers.files_before


def test_clean_refuses_what_is_not_a_run(run_cli, tmp_path: Path) -> None:
    proc = run_cli("clean", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"ncclsim: error: {tmp_path}: not a run directory of `ncclsim launch` (no rank.sh or launch.json)"]


# ---- several NCCL processes in one launched rank (torchrun) ----

@pytest.mark.e2e
def test_every_nccl_process_has_its_own_log(run_cli, ncclsim_exe: Path, tmp_path: Path) -> None:
    """Two NCCL programs in each launched rank (as torchrun's workers): each
    writes its own log, and the report reads them all."""
    run = tmp_path / "run"
    no_mpi = "env -u PMI_RANK -u PMI_SIZE -u PMI_FD -u PMI_PORT -u PMI_ID"
    probe = f"{no_mpi} {ncclsim_exe} probe --ops allreduce --sizes 1M"
    proc = run_cli("launch", "--run-dir", str(run), "--hosts", "2", "--gpus", "2", "--gpus-per-process", "2",
                   "--", "sh", "-c", f"{probe} & {probe}; wait", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        logs = sorted((run / "ranks" / str(r)).glob("nccl.*.log"))
        assert len(logs) == 2, logs
        assert all("Init COMPLETE" in p.read_text() for p in logs)
    report = json.loads((run / "run.json").read_text())
    assert len(report["communicators"]) == 4, report["communicators"]
    assert all(c["init_complete"] == 2 for c in report["communicators"])
    assert len(report["logs"]) == 4


# ---- a topology file of one's own ----

@pytest.mark.parametrize("command", [["launch", "--hosts", "1"], ["sweep", "--hosts", "1"],
                                     ["topo", "generate", "-o", "gen"]])
@pytest.mark.parametrize("args,message", [
    (["--topo", "missing.xml"], "--topo: missing.xml: no such file"),
    (["--topo", "box.xml", "--preset", "dgx-a100"], "argument --preset: not allowed with argument --topo"),
    (["--topo", "bad.xml"], "--topo: bad.xml:1: <system> has no <cpu>"),
    (["--gpu-model", "h100"], "--gpu-model names the model of --topo's GPUs: give --topo FILE"),
])
def test_a_bad_topo_file_is_one_line(run_cli, tmp_path: Path, command: list[str], args: list[str],
                                     message: str) -> None:
    (tmp_path / "bad.xml").write_text("<system version=\"1\"><gpu/></system>\n")
    (tmp_path / "box.xml").write_text("<system version=\"1\"></system>\n")
    proc = run_cli(*command, *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "ncclsim-runs").exists() and not (tmp_path / "ncclsim-sweeps").exists()
    assert not (tmp_path / "gen").exists()


@pytest.mark.parametrize("command", [["launch", "--hosts", "1"], ["sweep", "--hosts", "1"]])
def test_a_users_nccl_topo_file_is_refused(run_cli, tmp_path: Path, command: list[str]) -> None:
    proc = run_cli(*command, env={"NCCL_TOPO_FILE": "/data/my-box.xml"})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "NCCL_TOPO_FILE is set (/data/my-box.xml)" in lines[0] \
        and "--topo FILE" in lines[0], proc.stderr
    assert not (tmp_path / "ncclsim-runs").exists() and not (tmp_path / "ncclsim-sweeps").exists()


def test_the_launcher_waits_longer_after_a_long_look_at_its_ranks_but_not_past_the_timeout() -> None:
    assert next_wait(POLL, 0.001, None) == POLL  # a few ranks: the usual poll
    assert next_wait(POLL, 0.1, None) == pytest.approx(LOOK_SHARE * 0.1)  # 1,024 ranks: watching stays a small share
    assert next_wait(IDLE_POLL, 0.1, 0.5) == 0.5  # the timeout is still kept
    assert next_wait(POLL, 0.1, -1.0) == 0.0


def test_a_process_is_known_by_its_name_and_state_even_when_the_name_holds_a_parenthesis(tmp_path: Path) -> None:
    """/proc/<pid>/stat puts the name in parentheses: one that holds ") Z "
    must not read as a zombie (the launcher asks this of every wrapper)."""
    odd = tmp_path / "w) Z x"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", odd)
    proc = subprocess.Popen([str(odd), "30"])
    try:
        found = None
        for _ in range(100):  # the name is the program's once exec is done
            found = cleanup.name_and_state(proc.pid)
            if found and found[0] == odd.name:
                break
            time.sleep(0.01)
        assert found is not None and found[0] == odd.name and found[1] in "RS", found
        assert cleanup.running(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert cleanup.name_and_state(proc.pid) is None and not cleanup.running(proc.pid)
