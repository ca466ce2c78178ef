"""Two ranks under MPI: rank 0 all-reduces, rank 1 never calls the collective.

Run with NCCL_RUNTIME_CONNECT=0 (connections made at init, which both ranks
join), rank 0's emulated kernel waits for steps from rank 1 that never come:
the stall report (NCCLSIM_STALL_SECONDS) and launch's --timeout must say so.
With the argument `abort`, rank 0 calls ncclCommAbort after 2 s instead: the
emulated kernel must stop, its stream complete, and both ranks exit 0."""

from __future__ import annotations

import ctypes
import sys
import time

from nccl_world import nccl_world

from ncclsim.probe.bindings import NCCL_FLOAT32, NCCL_SUM

world = nccl_world()
libs, rank, comm = world.libs, world.rank, world.comm
nccl, cuda = libs.nccl, libs.cuda
buf = ctypes.c_void_p()
libs.cuda_check(cuda.cudaMalloc(buf, 1024), "cudaMalloc")
abort = sys.argv[1:] == ["abort"]
if rank == 0:
    libs.nccl_check(nccl.ncclAllReduce(buf, buf, 256, NCCL_FLOAT32, NCCL_SUM, comm, None),
                    "ncclAllReduce")
    if abort:
        time.sleep(2)
        libs.nccl_check(nccl.ncclCommAbort(comm), "ncclCommAbort")
    libs.cuda_check(cuda.cudaStreamSynchronize(None), "cudaStreamSynchronize")  # without abort: never
    print("rank 0: the aborted collective's stream completed", flush=True)
time.sleep(4 if abort else 600)
