"""One simulation spread over several machines: hostfile placement, the
interface NCCL and the simulated NICs use, cleanup on every machine, and
launch/'s Slurm template. Here the "machines" are names in a hostfile that
MPICH's Hydra starts on this machine (`-launcher fork`), each a node of its
own to MPI."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from ncclsim.launch.machines import HostfileError, place, read_hostfile
from ncclsim.launch.options import interface_exists
from ncclsim.rundir import RunDir

REPO = Path(__file__).resolve().parent.parent
FORK = ("--mpiexec-arg=-launcher", "--mpiexec-arg=fork")
SIOCGIFADDR = 0x8915


def _ipv4(interface: str) -> Optional[str]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", interface[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def _interface() -> tuple[str, str]:
    """An interface with an IPv4 address, not loopback when the machine has one."""
    named = [(n, _ipv4(n)) for _, n in socket.if_nameindex()]
    usable = [(n, a) for n, a in named if a]
    return next(((n, a) for n, a in usable if n != "lo"), ("lo", "127.0.0.1"))


# ---- placement ----

def test_hostfile_format(tmp_path: Path) -> None:
    f = tmp_path / "hosts"
    f.write_text("# the lab\nnode-a:8\n\n  node-b   # spare\nnode-a\n")
    assert read_hostfile(f) == ["node-a", "node-b"]
    for text, message in [("", "names no machine"), ("# only\n", "names no machine"),
                          ("node-a slots=4\n", ":1: expected `machine` or `machine:slots`"),
                          ("node-a:four\n", ":1: expected")]:
        f.write_text(text)
        with pytest.raises(HostfileError, match=message):
            read_hostfile(f)
    with pytest.raises(HostfileError, match="cannot read hostfile"):
        read_hostfile(tmp_path / "missing")


@pytest.mark.parametrize("hosts,machines,per_machine,used", [
    (4, 2, 2, 2), (5, 2, 3, 2), (1, 3, 1, 1), (3, 3, 1, 3), (16, 3, 6, 3), (7, 4, 2, 4)])
def test_whole_hosts_per_machine(tmp_path: Path, hosts: int, machines: int, per_machine: int,
                                 used: int) -> None:
    f = tmp_path / "hosts"
    f.write_text("".join(f"m{i}\n" for i in range(machines)))
    p = place(hosts, 8, f)
    assert (p.hosts_per_machine, len(p.machines)) == (per_machine, used)
    assert p.mpiexec_args(RunDir(tmp_path)) == ["-f", str(f.resolve()), "-ppn", str(8 * per_machine)]
    # No simulated host spans two machines: rank r is on machine r // ppn, host r // 8.
    for r in range(hosts * 8):
        assert (r // 8) // per_machine == r // p.processes_per_machine
    local = place(hosts, 8, None).mpiexec_args(RunDir(tmp_path))
    assert local == ["-f", str(tmp_path / "mpi-nodes"), "-launcher", "fork", "-ppn", "8"]
    assert (tmp_path / "mpi-nodes").read_text().split() == [f"ncclsim-h{h}" for h in range(hosts)]


def test_interface_syntax() -> None:
    assert interface_exists("lo") and interface_exists("=lo") and interface_exists("l")
    assert not interface_exists("=l") and not interface_exists("nosuch0")
    assert interface_exists("^nosuch0") and interface_exists("nosuch0,lo")


# ---- runs ----

def _machines(tmp_path: Path, names: tuple[str, ...] = ("node-a", "node-b")) -> Path:
    f = tmp_path / "machines"
    f.write_text("".join(n + "\n" for n in names))
    return f


@pytest.mark.e2e
def test_spread_over_two_machines(run_cli, leftovers, tmp_path: Path) -> None:
    """2 simulated hosts x 2 GPUs over two machines: each gets one whole host
    (MPI sees 2 local ranks per node), NCCL bootstraps and the simulated NICs
    carry the collectives over the chosen interface, results checked."""
    interface, address = _interface()
    run = tmp_path / "run"
    proc = run_cli("launch", "--run-dir", str(run), "--hosts", "2", "--gpus", "2",
                   "--hostfile", str(_machines(tmp_path)), "--interface", interface, *FORK, "--",
                   "sh", "-c", f'echo "local ranks $MPI_LOCALNRANKS"; exec {sys.executable} -m ncclsim.probe '
                   "--ops allreduce,allgather --sizes 8,1M", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "over 2 machine(s) of" in proc.stderr and "1 simulated host(s) each" in proc.stderr
    for r in range(4):
        out = (run / "ranks" / str(r) / "stdout").read_text()
        assert out.startswith("local ranks 2\n"), out[:200]
    out = (run / "ranks" / "0" / "stdout").read_text()
    assert out.count(" checked") == 4, out
    launch = json.loads((run / "launch.json").read_text())
    assert launch["mpiexec"][1:5] == ["-f", str(tmp_path.resolve() / "machines"), "-ppn", "2"]
    machine = Path("/proc/sys/kernel/hostname").read_text().strip()
    assert [r["machine"] for r in launch["ranks"]] == [machine] * 4
    log = "".join(p.read_text() for p in RunDir(run).rank(2).nccl_logs())
    assert f"TCP on {interface} {address};" in log
    report = json.loads(run_cli("report", str(run), "--json").stdout)
    assert report["nnodes"] == 2 and report["transports"]["inter_host"] == ["NET/ncclsim/GDRDMA"]
    # The cleanup ran once per machine.
    assert (run / "cleanup.log").read_text().count("process(es) stopped") == 2
    leftovers.assert_none(run)


@pytest.mark.e2e
def test_a_crash_on_a_spread_run_leaves_nothing(run_cli, leftovers, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = run_cli("launch", "--run-dir", str(run), "--hosts", "2", "--gpus", "2",
                   "--hostfile", str(_machines(tmp_path)), *FORK, "--", "sh", "-c",
                   f'if [ "$PMI_RANK" = 3 ]; then kill -SEGV $$; fi; exec {sys.executable} -m ncclsim.probe',
                   timeout=300)
    assert proc.returncode == 128 + 11, proc.stderr[-3000:]
    assert "rank 3 (host 1) was killed by signal 11" in proc.stderr, proc.stderr[-3000:]
    assert "cleaning up" not in proc.stderr
    leftovers.assert_none(run)


@pytest.mark.e2e
def test_an_unreachable_machine_is_named(run_cli, leftovers, tmp_path: Path) -> None:
    """Without the fork launcher Hydra reaches other machines by ssh: a machine
    that does not resolve fails the launch at once, with Hydra's reason."""
    run = tmp_path / "run"
    proc = run_cli("launch", "--run-dir", str(run), "--hosts", "2", "--gpus", "1",
                   "--hostfile", str(_machines(tmp_path, ("no-such-machine.invalid",))),
                   "--mpiexec-arg=-launcher", "--mpiexec-arg=ssh", timeout=120)
    assert proc.returncode != 0
    assert "ended without reporting a status (mpiexec status" in proc.stderr, proc.stderr[-3000:]
    assert "ssh" in proc.stderr, proc.stderr[-3000:]  # it does not resolve, or ssh is not installed
    leftovers.assert_none(run)


def test_bad_spread_arguments(run_cli, tmp_path: Path) -> None:
    proc = run_cli("launch", "--hostfile", str(tmp_path / "none"))
    assert proc.returncode == 2 and "cannot read hostfile" in proc.stderr
    proc = run_cli("launch", "--interface", "nosuch0")
    assert proc.returncode == 2 and "--interface nosuch0: no such network interface" in proc.stderr
    assert not (tmp_path / "ncclsim-runs").exists()


# ---- launch/slurm.sbatch ----

SBATCH = REPO / "launch" / "slurm.sbatch"


def _slurm_stand_in(tmp_path: Path, nodes: tuple[str, ...]) -> dict[str, str]:
    """What sbatch gives the script: the job's id and node list, and an
    `scontrol` that expands it (Slurm itself is not installed in CI)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text("#!/bin/sh\n[ \"$1 $2\" = 'show hostnames' ] || exit 1\n"
                        + "".join(f"echo {n}\n" for n in nodes))
    scontrol.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NODELIST": "node-[a-b]", "NCCLSIM": str(Path(sys.executable).parent / "ncclsim")}


@pytest.mark.e2e
def test_slurm_template_spreads_the_run(clean_env, tmp_path: Path) -> None:
    env = {**clean_env, **_slurm_stand_in(tmp_path, ("node-a", "node-b"))}
    proc = subprocess.run(["bash", str(SBATCH), "--hosts", "2", "--gpus", "2", *FORK], cwd=tmp_path, env=env,
                          text=True, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "ncclsim-runs" / "slurm-4242"
    assert (tmp_path / "ncclsim-runs" / "slurm-4242.machines").read_text() == "node-a\nnode-b\n"
    launch = json.loads((run / "launch.json").read_text())
    assert launch["status"] == 0 and launch["initialised"] == 4
    assert "-ppn" in launch["mpiexec"] and "Checks:" in proc.stdout


def test_slurm_template_outside_slurm(clean_env, tmp_path: Path) -> None:
    env = {**clean_env, "NCCLSIM": str(Path(sys.executable).parent / "ncclsim")}
    env.pop("SLURM_JOB_ID", None)
    proc = subprocess.run(["bash", str(SBATCH)], cwd=tmp_path, env=env, text=True, capture_output=True,
                          timeout=60)
    assert proc.returncode != 0 and "run this through sbatch" in proc.stderr
    assert not (tmp_path / "ncclsim-runs").exists()


def _slurm_nodes() -> int:
    """Idle nodes of a reachable Slurm cluster (0 where there is none, as in CI)."""
    try:
        out = subprocess.run(["sinfo", "-h", "-t", "idle", "-o", "%D"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(int(n) for n in out.stdout.split() if n.isdigit()) if out.returncode == 0 else 0


@pytest.mark.e2e
@pytest.mark.skipif(_slurm_nodes() < 2, reason="needs a Slurm cluster with 2 idle nodes")
def test_slurm_template_under_slurm(tmp_path: Path) -> None:
    env = {**os.environ, "NCCLSIM": str(Path(sys.executable).parent / "ncclsim")}
    proc = subprocess.run(["sbatch", "--wait", "--nodes=2", f"--output={tmp_path}/job.out", str(SBATCH),
                           "--hosts", "2", "--gpus", "2", "--", sys.executable, "-m", "ncclsim.probe",
                           "--ops", "allreduce", "--sizes", "8,1M"],
                          cwd=tmp_path, env=env, text=True, capture_output=True, timeout=600)
    job = (tmp_path / "job.out").read_text()
    assert proc.returncode == 0, proc.stderr + job[-3000:]
    assert job.count(" checked") == 2 and "finished in" in job and "with status 0" in job, job[-3000:]
