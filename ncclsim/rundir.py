"""The run directory, and the names of simulated hosts: the one place that
knows where a simulation's files are. Writers (launch, the per-host files,
topo generate) and readers (report, sweep, pictures, import) use it.

    launch.json          what was launched and how each rank ended
    run.json             the report (ncclsim report)
    timeline.json        the ranks' modelled timelines merged, a Chrome trace
                         (--clock model; written with the report)
    rank.sh              the per-rank wrapper mpiexec starts
    mpi-nodes            MPI's nodes on this machine: one per simulated host
    mpiexec.log          mpiexec's own output
    cleanup.log          the cleanup on every machine of a spread run
    watchdog.log         what was stopped after the launch itself died
    topo-spec.yaml       the hosts' machine as a spec, when launch --topo imported it
    topo-dump.xml        NCCL's fused topology of rank 0's host
    graph-dump.xml       NCCL's rings/trees graphs (rank 0)
    hosts/h<i>/          per simulated host: platform.conf, topo.xml, env
    ranks/<r>/           per launched rank: stdout, stderr, nccl.<pid>.log
                         and with --clock model timeline.<pid>.jsonl (one
                         per NCCL process), machine, pid, exit
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from ncclsim import NcclsimError
from ncclsim.files import read_small

LAUNCH_JSON = "launch.json"
RUN_JSON = "run.json"
TIMELINE_JSON = "timeline.json"
RANK_SCRIPT = "rank.sh"
MPI_NODES = "mpi-nodes"
MPIEXEC_LOG = "mpiexec.log"
CLEANUP_LOG = "cleanup.log"
WATCHDOG_LOG = "watchdog.log"
TOPO_DUMP = "topo-dump.xml"
TOPO_SPEC = "topo-spec.yaml"
GRAPH_DUMP = "graph-dump.xml"
HOSTS = "hosts"
RANKS = "ranks"
DEFAULT_BASE = Path("ncclsim-runs")

# The simulated host's name: what gethostname() returns on it, its NCCL_HOSTID
# and its MPI node name. The C side reads the trailing number as the index.
HOST_NAME_PREFIX = "ncclsim-h"


def host_name(index: int) -> str:
    return f"{HOST_NAME_PREFIX}{index}"


def host_index(name: object) -> Optional[int]:
    """The index of a simulated host's name (None for any other name)."""
    m = re.fullmatch(re.escape(HOST_NAME_PREFIX) + r"(\d+)", str(name))
    return int(m.group(1)) if m else None


# A shell variable ("$host", "$rank") stands for the index in rank.sh.
Index = Union[int, str]


@dataclass(frozen=True)
class HostFiles:
    """What one simulated host is made of: h<i>/ under a run's hosts/ (or under
    the output directory of `ncclsim topo generate`)."""
    directory: Path

    @classmethod
    def of(cls, base: Path, index: Index) -> "HostFiles":
        return cls(Path(base) / f"h{index}")

    @property
    def platform_conf(self) -> Path:  # NCCLSIM_PLATFORM: the driver's, NVML's and the NICs' host
        return self.directory / "platform.conf"

    @property
    def topo_xml(self) -> Path:  # NCCL_TOPO_FILE
        return self.directory / "topo.xml"

    @property
    def env(self) -> Path:  # the host's variables as `export` lines, sourced by rank.sh
        return self.directory / "env"

    @property
    def time_board(self) -> Path:  # NCCLSIM_TIME_BOARD: modelled times beside the host's data (--clock model)
        return self.directory / "time-board"

    @property
    def wake_board(self) -> Path:  # NCCLSIM_WAKE_BOARD: who sleeps on which words of the host's memory
        return self.directory / "wake-board"

    @property
    def delivery_board(self) -> Path:  # NCCLSIM_DELIVERY_BOARD: where NVLS gathers want their steps
        return self.directory / "delivery-board"


def host_topologies(base: Path) -> list[Path]:
    """base/h<i>/topo.xml of every host there, in host order."""
    found = [(int(m.group(1)), HostFiles(d).topo_xml) for d in Path(base).iterdir()
             if (m := re.fullmatch(r"h(\d+)", d.name)) and HostFiles(d).topo_xml.is_file()]
    return [p for _, p in sorted(found)]


@dataclass(frozen=True)
class RankFiles:
    """One launched rank's files (one process started by mpiexec, which may
    start more: torchrun)."""
    directory: Path

    @property
    def stdout(self) -> Path:
        return self.directory / "stdout"

    @property
    def stderr(self) -> Path:
        return self.directory / "stderr"

    @property
    def torchrun_logs(self) -> Path:
        """torchrun's log directory (PET_LOG_DIR): by default torchrun makes a
        new /tmp/torchelastic_* on every run and never removes it."""
        return self.directory / "torchrun"

    @property
    def machine(self) -> Path:  # the real machine it ran on
        return self.directory / "machine"

    @property
    def pid(self) -> Path:  # the wrapper's pid on that machine (written after `machine`)
        return self.directory / "pid"

    @property
    def exit(self) -> Path:  # its exit status, written when it ends
        return self.directory / "exit"

    @property
    def nccl_log(self) -> str:
        """NCCL_DEBUG_FILE: NCCL puts each process's pid for %p, so every NCCL
        process of the rank has a log of its own."""
        return str(self.directory / "nccl.%p.log")

    def nccl_logs(self) -> list[Path]:
        try:
            names = os.listdir(self.directory)  # not glob: the launcher asks this of every rank as it watches
        except OSError:
            return []
        return [self.directory / n for n in sorted(names) if n.startswith("nccl.") and n.endswith(".log")]

    @property
    def timeline(self) -> str:
        """NCCLSIM_TIMELINE: the driver puts its pid for %p, one file per NCCL process."""
        return str(self.directory / "timeline.%p.jsonl")

    def timelines(self) -> list[Path]:
        return sorted(self.directory.glob("timeline.*.jsonl"))

    def status(self) -> Optional[int]:
        """The exit status, once the rank has ended (None while it runs)."""
        return _int(read_small(self.exit))

    def machine_name(self) -> Optional[str]:
        """The real machine (None before the rank started)."""
        return (read_small(self.machine) or "").strip() or None

    def wrapper_pid(self) -> Optional[int]:
        return _int(read_small(self.pid))


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def launch_json(self) -> Path:
        return self.root / LAUNCH_JSON

    @property
    def run_json(self) -> Path:
        return self.root / RUN_JSON

    @property
    def timeline_json(self) -> Path:
        return self.root / TIMELINE_JSON

    @property
    def rank_script(self) -> Path:
        return self.root / RANK_SCRIPT

    @property
    def mpi_nodes(self) -> Path:
        return self.root / MPI_NODES

    @property
    def mpiexec_log(self) -> Path:
        return self.root / MPIEXEC_LOG

    @property
    def cleanup_log(self) -> Path:
        return self.root / CLEANUP_LOG

    @property
    def watchdog_log(self) -> Path:
        return self.root / WATCHDOG_LOG

    @property
    def topo_dump(self) -> Path:
        return self.root / TOPO_DUMP

    @property
    def topo_spec(self) -> Path:
        return self.root / TOPO_SPEC

    @property
    def graph_dump(self) -> Path:
        return self.root / GRAPH_DUMP

    @property
    def hosts_dir(self) -> Path:
        return self.root / HOSTS

    def host(self, index: Index) -> HostFiles:
        return HostFiles.of(self.hosts_dir, index)

    def rank(self, rank: Index) -> RankFiles:
        return RankFiles(self.root / RANKS / str(rank))

    def rank_numbers(self) -> list[int]:
        """The launched ranks that have a directory, in order."""
        try:
            return sorted(int(d.name) for d in (self.root / RANKS).iterdir() if d.name.isdigit() and d.is_dir())
        except OSError:
            return []

    def is_launch_run(self) -> bool:
        """Written by `ncclsim launch` (rather than NCCL output of another launcher)."""
        return self.launch_json.is_file() or self.run_json.is_file() or self.rank_script.is_file()


def new_dir(base: Path, stem: str) -> Path:
    """A new, empty directory `base/stem`, made here so that no other process
    takes it: `stem-2`, `stem-3`, ... when the name is taken (two launches or
    sweeps named after the same second)."""
    base.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        path = base / (stem if n == 1 else f"{stem}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            n += 1


def remove_if_empty(path: Path) -> None:
    """Take back a directory new_dir made when nothing was written into it
    (its base too, when that is empty now)."""
    for d in (path, path.parent):
        try:
            d.rmdir()
        except OSError:  # not empty, or gone
            return


def default_run_dir(hosts: int, gpus: int, base: Path = DEFAULT_BASE) -> Path:
    """A new, empty run directory under `base` named after the time and the shape."""
    return new_dir(base, f"{time.strftime('%Y%m%d-%H%M%S')}-{hosts}x{gpus}")


def create(path: Path, nranks: int, hosts: int) -> RunDir:
    """A fresh run directory. A directory with anything in it is refused (it
    would mix runs); so is one another launch claims at the same moment: the
    claim is making its hosts/, which only one process can win."""
    taken = NcclsimError(f"run directory {path} exists and is not empty: choose another --run-dir")
    if path.exists() and not path.is_dir():
        raise NcclsimError(f"run directory {path} is not a directory: choose another --run-dir")
    try:
        if path.exists() and not _is_empty(path):
            raise taken
        path.mkdir(parents=True, exist_ok=True)
        run = RunDir(path.resolve())
        run.hosts_dir.mkdir()
    except FileExistsError:
        raise taken from None
    except OSError as e:
        raise NcclsimError(f"cannot make run directory {path}: {e.strerror}") from None
    for h in range(hosts):
        run.host(h).directory.mkdir(parents=True, exist_ok=True)
    for r in range(nranks):
        run.rank(r).directory.mkdir(parents=True, exist_ok=True)
    return run


def _is_empty(path: Path) -> bool:
    return not any(path.iterdir())
