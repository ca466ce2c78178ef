"""What a rank needs to find the others the way PyTorch programs do: the
variables of torch.distributed's `env://` (RANK, WORLD_SIZE, LOCAL_RANK, ...),
and torchrun's own (PET_*), so that `launch -- python train.py` runs a
torchrun-style script one process per GPU, and `launch --gpus-per-process G
-- torchrun train.py` runs torchrun once per simulated host with G workers,
as on a real cluster; and the GPUs each process drives, for the probe.
rank.sh exports them; $rank and $host are its own."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from ncclsim.launch.machines import Placement
from ncclsim.platform.rank_env import GPUS_PER_PROCESS_VARIABLE

LOCAL_ADDR = "127.0.0.1"


def free_port() -> int:
    """A TCP port free on this machine now (the store of rank 0 binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCAL_ADDR, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Rendezvous:
    hosts: int
    processes_per_host: int
    gpus_per_process: int
    master_addr: str
    master_port: int

    @classmethod
    def of(cls, placement: Placement, hosts: int, gpus_per_process: int) -> "Rendezvous":
        """Rank 0 runs on the first machine: this one, or the hostfile's first."""
        addr = placement.machines[0] if placement.spread else LOCAL_ADDR
        return cls(hosts, placement.processes_per_host, gpus_per_process, addr, free_port())

    def shell(self, torchrun_logs: str) -> str:
        """The export lines of rank.sh; `torchrun_logs`: torchrun's log
        directory unless the caller chose one (PET_LOG_DIR)."""
        world = self.hosts * self.processes_per_host
        return (f"export RANK=$rank WORLD_SIZE={world} LOCAL_RANK=$((rank % {self.processes_per_host})) "
                f"LOCAL_WORLD_SIZE={self.processes_per_host} GROUP_RANK=$host "
                f"MASTER_ADDR={self.master_addr} MASTER_PORT={self.master_port}\n"
                f"export PET_NNODES={self.hosts} PET_NODE_RANK=$host "
                f"PET_NPROC_PER_NODE={self.gpus_per_process} "
                f"PET_MASTER_ADDR={self.master_addr} PET_MASTER_PORT={self.master_port} "
                f'PET_LOG_DIR="${{PET_LOG_DIR:-{torchrun_logs}}}"\n'
                f"export {GPUS_PER_PROCESS_VARIABLE}={self.gpus_per_process}\n")
