"""Two ranks under MPI all-reduce 8 B, one of them LATE seconds late: the
other's emulated GPU waits that long for its peer's data, a word the peer's
emulation writes and wakes it for. Rank 0 (the punctual one) prints how
often its stream workers were switched out during the wait (sleeping and
waking again for nothing costs a switch each) and checks the sum."""

from __future__ import annotations

import ctypes
import struct
import time

from nccl_world import nccl_world
from proc_status import threads_total

from ncclsim.probe.bindings import CUDA_MEMCPY_D2H, CUDA_MEMCPY_H2D, NCCL_FLOAT32, NCCL_SUM

LATE = 1.0  # seconds


libs, world, rank, nranks, comm = nccl_world()
nccl, cuda = libs.nccl, libs.cuda
buf = ctypes.c_void_p()
libs.cuda_check(cuda.cudaMalloc(buf, 4), "cudaMalloc")


def allreduce(value: float) -> float:
    libs.cuda_check(cuda.cudaMemcpy(buf, struct.pack("<f", value), 4, CUDA_MEMCPY_H2D), "cudaMemcpy")
    libs.nccl_check(nccl.ncclAllReduce(buf, buf, 1, NCCL_FLOAT32, NCCL_SUM, comm, None),
                    "ncclAllReduce")
    libs.cuda_check(cuda.cudaStreamSynchronize(None), "cudaStreamSynchronize")
    host = ctypes.create_string_buffer(4)
    libs.cuda_check(cuda.cudaMemcpy(host, buf, 4, CUDA_MEMCPY_D2H), "cudaMemcpy")
    return struct.unpack("<f", host.raw)[0]


want = float(nranks * (nranks + 1) // 2)
if allreduce(float(rank + 1)) != want:  # connections set up, threads started
    raise SystemExit(f"rank {rank}: the first AllReduce is wrong")
world.Barrier()
if rank != 0:
    time.sleep(LATE)
before, start = threads_total("ncclsim stream", "voluntary_ctxt_switches"), time.monotonic()
got = allreduce(float(rank + 1))
waited, switches = time.monotonic() - start, threads_total("ncclsim stream", "voluntary_ctxt_switches") - before
if got != want:
    raise SystemExit(f"rank {rank}: the late AllReduce gave {got}, not {want}")
libs.nccl_check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
if rank == 0:
    print(f"waited {waited:.2f} s for a peer {LATE} s late; stream workers switched {switches} times", flush=True)
