"""The run directory: everything one simulation writes, in one place.

    launch.json            what was launched and how each rank ended
    run.json               the report (ncclsim report)
    rank.sh                the per-rank wrapper mpiexec starts
    mpi-nodes              MPI's nodes on this machine: one per simulated host
    hosts/h<i>/            per simulated host: platform.conf, topo.xml
    ranks/<r>/             per rank: stdout, stderr, nccl.log, machine, exit
    topo-dump.xml          NCCL's fused topology of rank 0's host
    graph-dump.xml         NCCL's rings/trees graphs (rank 0)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def launch_json(self) -> Path:
        return self.root / "launch.json"

    @property
    def rank_script(self) -> Path:
        return self.root / "rank.sh"

    def host(self, index: int) -> Path:
        return self.root / "hosts" / f"h{index}"

    def rank(self, rank: int) -> Path:
        return self.root / "ranks" / str(rank)

    def rank_exit(self, rank: int) -> Optional[int]:
        """The rank's exit status, once it has ended (None while it runs)."""
        try:
            return int((self.rank(rank) / "exit").read_text().strip())
        except (OSError, ValueError):
            return None

    def rank_machine(self, rank: int) -> Optional[str]:
        """The real machine the rank ran on (None before it started)."""
        try:
            return (self.rank(rank) / "machine").read_text().strip() or None
        except OSError:
            return None

    @property
    def topo_dump(self) -> Path:
        return self.root / "topo-dump.xml"

    @property
    def graph_dump(self) -> Path:
        return self.root / "graph-dump.xml"


def default_run_dir(hosts: int, gpus: int, base: Path = Path("ncclsim-runs")) -> Path:
    return base / f"{time.strftime('%Y%m%d-%H%M%S')}-{hosts}x{gpus}"


def create(path: Path, nranks: int, hosts: int) -> RunDir:
    """A fresh run directory; an existing non-empty one is refused (it would mix runs)."""
    if path.exists() and any(path.iterdir()):
        from ncclsim import NcclsimError
        raise NcclsimError(f"run directory {path} exists and is not empty: choose another --run-dir")
    run = RunDir(path.resolve())
    for h in range(hosts):
        run.host(h).mkdir(parents=True, exist_ok=True)
    for r in range(nranks):
        run.rank(r).mkdir(parents=True, exist_ok=True)
    return run
