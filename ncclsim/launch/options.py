"""What the user asked `ncclsim launch` for, checked before anything runs."""

from __future__ import annotations

import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from ncclsim import NcclsimError
from ncclsim.nccl.wheels import parse_spec
from ncclsim.paths import ncclsim_command

MAX_HOSTS = 1024
CLOCKS = ("wall", "model")  # see ncclsim/platform/env.py clock_settings


class LaunchError(NcclsimError):
    pass


@dataclass(frozen=True)
class LaunchOptions:
    hosts: int = 2
    gpus: Optional[int] = None  # per host; None: the preset's
    preset: str = "dgx-h100"
    topo: Optional[str] = None  # an NCCL topology file (or `nvidia-smi topo -m`): every host is that machine
    gpu_model: Optional[str] = None  # the model of `topo`'s GPUs, where the file does not tell
    nics: Optional[int] = None  # per host; None: the preset's
    gpus_per_process: int = 1
    timeout: float = 0.0  # seconds; 0: none
    run_dir: Optional[Path] = None
    command: tuple[str, ...] = ()  # empty: the built-in probe
    nccl: str = "installed"  # or a release spec of ncclsim.nccl.wheels ("2.27.7", "cu13:2.32.3")
    hostfile: Optional[Path] = None  # real machines to spread over; None: this one
    interface: Optional[str] = None  # NCCL_SOCKET_IFNAME for bootstrap and simulated NICs
    mpiexec_args: tuple[str, ...] = ()  # passed to mpiexec as they are
    collnet: Optional[bool] = None  # the network reduces in its switches; None: as the preset says
    clock: str = "wall"  # one of CLOCKS
    timeline: bool = False  # the modelled timeline also records every step (--clock model only)
    no_payload: bool = False  # NCCL's protocol and modelled time without moving data
    keep_free: Optional[int] = None  # bytes of memory the memory guard keeps free; None: its default, 0: off

    def check(self) -> None:
        if not 1 <= self.hosts <= MAX_HOSTS:
            raise LaunchError(f"--hosts must be 1..{MAX_HOSTS}, got {self.hosts}")
        if self.gpus is not None and self.gpus < 1:
            raise LaunchError(f"--gpus must be at least 1, got {self.gpus}")
        if self.nics is not None and self.nics < 0:
            raise LaunchError(f"--nics must be 0 or more, got {self.nics}")
        if self.gpus_per_process < 1:
            raise LaunchError(f"--gpus-per-process must be at least 1, got {self.gpus_per_process}")
        if self.clock not in CLOCKS:
            raise LaunchError(f"--clock must be one of {', '.join(CLOCKS)}, got {self.clock!r}")
        if self.timeline and self.clock != "model":
            raise LaunchError("--timeline records modelled time: it needs --clock model")
        if self.timeout < 0:
            raise LaunchError(f"--timeout must be 0 (none) or more seconds, got {self.timeout:g}")
        if self.command:
            resolve_command(self.command[0])
        if self.nccl != "installed":
            parse_spec(self.nccl)
        if self.interface is not None and self.hostfile is None and not interface_exists(self.interface):
            names = ", ".join(sorted(n for _, n in socket.if_nameindex()))
            raise LaunchError(f"--interface {self.interface}: no such network interface on this "
                              f"machine (it has {names})")


def interface_exists(spec: str) -> bool:
    """Whether an interface of this machine matches `spec` (NCCL_SOCKET_IFNAME's
    syntax: comma-separated prefixes, `=` for exact names, `^` to exclude)."""
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    wanted = [w for w in spec.lstrip("=").split(",") if w]
    for _, name in socket.if_nameindex():
        hit = any(name == w if exact else name.startswith(w) for w in wanted)
        if hit != exclude:
            return True
    return False


def resolve_command(name: str) -> str:
    """The program as it will be started: an executable path or a name on PATH."""
    if os.sep in name:
        p = Path(name)
        if not p.exists():
            raise LaunchError(f"command not found: {name}")
        if p.is_dir() or not os.access(p, os.X_OK):
            raise LaunchError(f"command is not an executable file: {name}")
        return os.path.abspath(p)  # not resolve(): a venv's python is a symlink that must stay one
    found = shutil.which(name)
    if not found:
        raise LaunchError(f"command not found on PATH: {name}")
    return found


# What the built-in probe runs by default: one AllReduce per size from 8 B to
# 16 MiB, enough for the report to show NCCL's algorithm and protocol choices.
PROBE_SIZES = (8, 64 << 10, 1 << 20, 16 << 20)
# Each simulated GPU's send and receive buffers of the largest size are this
# machine's memory: with many GPUs the largest sizes are left out until all
# the buffers take at most this share of the memory available.
PROBE_MEMORY_SHARE = 0.25


def probe_sizes(gpus_here: int, available: int) -> tuple[int, ...]:
    """The default probe's sizes for `gpus_here` simulated GPUs on a machine
    with `available` bytes of memory available (at least 8 B and 64 KiB)."""
    sizes = list(PROBE_SIZES)
    while len(sizes) > 2 and 2 * sizes[-1] * gpus_here > PROBE_MEMORY_SHARE * available:
        sizes.pop()
    return tuple(sizes)


def probe_command(gpus_per_process: int, sizes: tuple[int, ...] = PROBE_SIZES,
                  room: Optional[int] = None) -> tuple[str, ...]:
    """`room`: memory and swap available at the start. Past its buffers, a size's
    memory is NCCL's (its connections and proxy pools for that size's algorithm):
    the probe leaves out what is left once less than the same share of `room` stays
    available, rather than have the memory guard stop the run."""
    floor = ("--min-free", str(int(PROBE_MEMORY_SHARE * room))) if room else ()
    return (*ncclsim_command(), "probe", "--gpus-per-process", str(gpus_per_process), "--ops", "allreduce",
            "--sizes", ",".join(str(n) for n in sizes), *floor)


def check_environment(environ: Mapping[str, str]) -> None:
    """Settings of the caller that the simulation cannot honour."""
    if environ.get("NCCL_TOPO_FILE"):
        raise LaunchError(
            f"NCCL_TOPO_FILE is set ({environ['NCCL_TOPO_FILE']}): ncclsim gives every simulated host "
            "a topology file of its own; to simulate the machine that file describes, use "
            "`--topo FILE` (each host gets that machine in its own PCI domain)")
