"""cffi bindings to the subset of NCCL and the CUDA runtime the probe uses.

The libraries are loaded by soname, so the environment (LD_LIBRARY_PATH, as
`ncclsim env` and `ncclsim launch` set it) decides which NCCL runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cffi import FFI

from ncclsim import NcclsimError

CDEF = """
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct ncclComm *ncclComm_t;
typedef struct CUstream_st *cudaStream_t;

int ncclGetVersion(int *version);
int ncclGetUniqueId(ncclUniqueId *id);
int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
int ncclGroupStart(void);
int ncclGroupEnd(void);
int ncclAllReduce(const void *s, void *r, size_t n, int type, int op, ncclComm_t c, cudaStream_t st);
int ncclBroadcast(const void *s, void *r, size_t n, int type, int root, ncclComm_t c, cudaStream_t st);
int ncclReduce(const void *s, void *r, size_t n, int type, int op, int root, ncclComm_t c, cudaStream_t st);
int ncclAllGather(const void *s, void *r, size_t n, int type, ncclComm_t c, cudaStream_t st);
int ncclReduceScatter(const void *s, void *r, size_t n, int type, int op, ncclComm_t c, cudaStream_t st);
int ncclSend(const void *s, size_t n, int type, int peer, ncclComm_t c, cudaStream_t st);
int ncclRecv(void *r, size_t n, int type, int peer, ncclComm_t c, cudaStream_t st);
int ncclCommDestroy(ncclComm_t comm);
int ncclCommAbort(ncclComm_t comm);
const char *ncclGetErrorString(int result);

int cudaSetDevice(int device);
int cudaGetDeviceCount(int *count);
int cudaMalloc(void **p, size_t size);
int cudaFree(void *p);
int cudaMemset(void *p, int value, size_t size);
int cudaMemcpy(void *dst, const void *src, size_t size, int kind);
int cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags);
int cudaStreamSynchronize(cudaStream_t s);
int cudaStreamDestroy(cudaStream_t s);
const char *cudaGetErrorString(int error);
"""

NCCL_FLOAT32 = 7
NCCL_SUM, NCCL_MAX, NCCL_MIN = 0, 2, 3  # ncclRedOp_t
CUDA_STREAM_NON_BLOCKING = 1
CUDA_MEMCPY_H2D, CUDA_MEMCPY_D2H = 1, 2  # cudaMemcpyKind


class ProbeError(NcclsimError):
    pass


@dataclass
class Libraries:
    ffi: FFI
    nccl: Any
    cuda: Any

    def nccl_check(self, result: int, what: str) -> None:
        if result != 0:
            text = self.ffi.string(self.nccl.ncclGetErrorString(result)).decode()
            raise ProbeError(f"{what} failed: NCCL error {result} ({text})")

    def cuda_check(self, result: int, what: str) -> None:
        if result != 0:
            text = self.ffi.string(self.cuda.cudaGetErrorString(result)).decode()
            raise ProbeError(f"{what} failed: CUDA error {result} ({text})")

    def nccl_version(self) -> str:
        v = self.ffi.new("int *")
        self.nccl_check(self.nccl.ncclGetVersion(v), "ncclGetVersion")
        return f"{v[0] // 10000}.{v[0] % 10000 // 100}.{v[0] % 100}"


def load(nccl: str = "libnccl.so.2", cudart: str = "libcudart.so.12") -> Libraries:
    ffi = FFI()
    ffi.cdef(CDEF)
    try:
        return Libraries(ffi, ffi.dlopen(nccl), ffi.dlopen(cudart))
    except OSError as e:
        raise ProbeError(f"cannot load NCCL or the CUDA runtime ({e}); run under `ncclsim launch` "
                         "or after `eval \"$(ncclsim env)\"`") from e
