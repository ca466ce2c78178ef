"""Ranks under MPI all-reduce 4 MiB inputs that nobody wrote (a program's own
kernels would write them on a GPU; the simulated GPU runs none), after one
AllReduce of written inputs that sets up NCCL's buffers: the result must be
zeros on every rank. Rank 0 prints the most any rank's shared memory in use
grew during the unwritten one (reading the holes in place would fault in the
inputs' pages, its own and those of peers it reads)."""

from __future__ import annotations

import ctypes
import struct

from nccl_world import nccl_world
from proc_status import status_kib

from ncclsim.probe.bindings import CUDA_MEMCPY_D2H, CUDA_MEMCPY_H2D, NCCL_FLOAT32, NCCL_SUM

COUNT = 1 << 20  # floats: 4 MiB per rank
NBYTES = COUNT * 4


libs, world, rank, nranks, comm = nccl_world()
nccl, cuda = libs.nccl, libs.cuda
written, unwritten, out = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
for p in (written, unwritten, out):
    libs.cuda_check(cuda.cudaMalloc(p, NBYTES), "cudaMalloc")


def allreduce(src: object) -> bytes:
    libs.cuda_check(cuda.cudaMemset(out, 0x7F, NBYTES), "cudaMemset")
    libs.nccl_check(nccl.ncclAllReduce(src, out, COUNT, NCCL_FLOAT32, NCCL_SUM, comm, None),
                    "ncclAllReduce")
    libs.cuda_check(cuda.cudaStreamSynchronize(None), "cudaStreamSynchronize")
    host = ctypes.create_string_buffer(NBYTES)
    libs.cuda_check(cuda.cudaMemcpy(host, out, NBYTES, CUDA_MEMCPY_D2H), "cudaMemcpy")
    return host.raw


mine = struct.pack("<f", float(rank + 1)) * COUNT
libs.cuda_check(cuda.cudaMemcpy(written, mine, NBYTES, CUDA_MEMCPY_H2D), "cudaMemcpy")
want = struct.pack("<f", float(nranks * (nranks + 1) // 2)) * COUNT
if allreduce(written) != want:
    raise SystemExit(f"rank {rank}: the written inputs' AllReduce is wrong")
world.Barrier()
before = status_kib("RssShmem")
got = allreduce(unwritten)
grew = status_kib("RssShmem") - before
if got != bytes(NBYTES):
    first = next(i for i, b in enumerate(got) if b)
    raise SystemExit(f"rank {rank}: unwritten inputs' AllReduce gave a non-zero byte at {first}")
growths = world.gather(grew, root=0)
libs.nccl_check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
if rank == 0:
    print(f"unwritten inputs of {NBYTES >> 10} KiB on {nranks} ranks: zeros; "
          f"shared memory grew at most {max(growths)} KiB", flush=True)
