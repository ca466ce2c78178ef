"""Where the ranks run: this machine, or several real machines named in an
MPI hostfile. A simulated host never spans two machines (its ranks share
memory through /dev/shm), so whole simulated hosts are placed per machine:
the first machine gets hosts 0..k-1, the next k..2k-1, and so on.

On this machine each simulated host is a node of its own to MPI (one Hydra
proxy per host, started by fork): MPI's local ranks (MPI_LOCALRANKID,
MPI_Comm_split_type) are the simulated host's, and no proxy serves hundreds
of ranks (Hydra's proxy and mpiexec deadlock writing to each other at ~512
ranks behind one proxy)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ncclsim import NcclsimError
from ncclsim.rundir import RunDir, host_name

# A hostfile line: a machine name, optionally `:slots` (which ncclsim
# overrides: it places whole simulated hosts per machine).
_LINE = re.compile(r"^([^\s:]+)(?::(\d+))?$")


class HostfileError(NcclsimError):
    pass


def read_hostfile(path: Path) -> list[str]:
    """The machine names of an MPI hostfile (Hydra's format: one per line,
    `name[:slots]`, `#` comments), in order, each once."""
    try:
        text = path.read_text()
    except OSError as e:
        raise HostfileError(f"cannot read hostfile {path}: {e.strerror or e}") from None
    machines: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _LINE.match(line)
        if not m:
            raise HostfileError(f"{path}:{number}: expected `machine` or `machine:slots`, got {raw.strip()!r}")
        if m.group(1) not in machines:
            machines.append(m.group(1))
    if not machines:
        raise HostfileError(f"hostfile {path} names no machine")
    return machines


@dataclass(frozen=True)
class Placement:
    """How `hosts` simulated hosts of `processes_per_host` ranks each are
    spread; `hostfile` None means all on this machine."""
    hostfile: Optional[Path]
    machines: tuple[str, ...]
    hosts_per_machine: int
    processes_per_host: int

    @property
    def processes_per_machine(self) -> int:
        return self.hosts_per_machine * self.processes_per_host

    @property
    def spread(self) -> bool:
        return self.hostfile is not None

    def mpiexec_args(self, run: RunDir) -> list[str]:
        """mpiexec's placement arguments; on this machine they name a node
        file written into the run directory."""
        if self.hostfile is None:
            nodes = write_local_nodes(run, self.hosts_per_machine)
            # fork: the names are MPI's only (and even inside a Slurm
            # allocation the ranks stay on this machine).
            return ["-f", str(nodes), "-launcher", "fork", "-ppn", str(self.processes_per_host)]
        return ["-f", str(self.hostfile), "-ppn", str(self.processes_per_machine)]


def write_local_nodes(run: RunDir, hosts: int) -> Path:
    """One MPI node per simulated host, named as the host calls itself."""
    run.mpi_nodes.write_text("".join(host_name(h) + "\n" for h in range(hosts)))
    return run.mpi_nodes


def place(hosts: int, processes_per_host: int, hostfile: Optional[Path]) -> Placement:
    if hostfile is None:
        return Placement(None, ("localhost",), hosts, processes_per_host)
    machines = read_hostfile(hostfile)
    per_machine = math.ceil(hosts / len(machines))
    used = math.ceil(hosts / per_machine)
    return Placement(hostfile.resolve(), tuple(machines[:used]), per_machine, processes_per_host)
