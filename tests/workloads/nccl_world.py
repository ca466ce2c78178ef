"""One NCCL communicator over MPI's world, for the workloads that run as
ranks under `ncclsim launch` (they run as scripts: this directory is on
their path). Each rank drives its host's n-th GPU, n being its place among
the ranks of its host."""

from __future__ import annotations

import ctypes
import socket
from typing import Any, NamedTuple

from mpi4py import MPI

from ncclsim.probe.bindings import Libraries, load


class World(NamedTuple):
    libs: Libraries  # nccl, cuda and their checks
    mpi: Any  # MPI.COMM_WORLD
    rank: int
    nranks: int
    comm: ctypes.c_void_p  # ncclComm_t, initialised over every rank


def nccl_world() -> World:
    libs = load()
    nccl, cuda = libs.nccl, libs.cuda
    world = MPI.COMM_WORLD
    rank, nranks = world.Get_rank(), world.Get_size()
    uid = libs.shared_unique_id(rank == 0, world.bcast)  # mpi4py's bcast: from rank 0
    hosts = world.allgather(socket.gethostname())
    libs.cuda_check(cuda.cudaSetDevice(hosts[:rank].count(hosts[rank])), "cudaSetDevice")
    comm = ctypes.c_void_p()
    libs.nccl_check(nccl.ncclCommInitRank(comm, nranks, uid, rank), "ncclCommInitRank")
    return World(libs, world, rank, nranks, comm)
