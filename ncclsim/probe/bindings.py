"""ctypes bindings to the subset of NCCL and the CUDA runtime the probe uses.

The libraries are loaded by soname, so the environment (LD_LIBRARY_PATH, as
`ncclsim env` and `ncclsim launch` set it) decides which NCCL runs. ctypes,
not a C parser reading declarations at every start: the probe starts once
per rank of a launch, hundreds at a time.

Handles and device pointers are `ctypes.c_void_p`: passed where the C side
takes a pointer to one (an output), ctypes passes its address; passed where
it takes the handle or pointer itself, its value. None is NULL.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_uint, c_void_p
from typing import Any, Callable, NamedTuple, Optional

from ncclsim import NcclsimError


class UniqueId(ctypes.Structure):
    """ncclUniqueId: 128 opaque bytes, passed by value to ncclCommInitRank."""
    _fields_ = [("internal", ctypes.c_char * 128)]


_P = c_void_p  # a handle (ncclComm_t, cudaStream_t) or a device pointer
_OUT = POINTER(c_void_p)  # where the library writes one
_COUNT, _TYPE, _OP, _RANK = c_size_t, c_int, c_int, c_int

# name: (result type, argument types)
NCCL = {
    "ncclGetVersion": (c_int, (POINTER(c_int),)),
    "ncclGetUniqueId": (c_int, (POINTER(UniqueId),)),
    "ncclCommInitRank": (c_int, (_OUT, c_int, UniqueId, c_int)),
    "ncclGroupStart": (c_int, ()),
    "ncclGroupEnd": (c_int, ()),
    "ncclAllReduce": (c_int, (_P, _P, _COUNT, _TYPE, _OP, _P, _P)),
    "ncclBroadcast": (c_int, (_P, _P, _COUNT, _TYPE, _RANK, _P, _P)),
    "ncclReduce": (c_int, (_P, _P, _COUNT, _TYPE, _OP, _RANK, _P, _P)),
    "ncclAllGather": (c_int, (_P, _P, _COUNT, _TYPE, _P, _P)),
    "ncclReduceScatter": (c_int, (_P, _P, _COUNT, _TYPE, _OP, _P, _P)),
    "ncclSend": (c_int, (_P, _COUNT, _TYPE, _RANK, _P, _P)),
    "ncclRecv": (c_int, (_P, _COUNT, _TYPE, _RANK, _P, _P)),
    "ncclCommDestroy": (c_int, (_P,)),
    "ncclCommAbort": (c_int, (_P,)),
    "ncclGetErrorString": (c_char_p, (c_int,)),
}
CUDART = {
    "cudaSetDevice": (c_int, (c_int,)),
    "cudaGetDeviceCount": (c_int, (POINTER(c_int),)),
    "cudaMalloc": (c_int, (_OUT, c_size_t)),
    "cudaFree": (c_int, (_P,)),
    "cudaMemset": (c_int, (_P, c_int, c_size_t)),
    "cudaMemcpy": (c_int, (_P, _P, c_size_t, c_int)),
    "cudaStreamCreateWithFlags": (c_int, (_OUT, c_uint)),
    "cudaStreamSynchronize": (c_int, (_P,)),
    "cudaStreamDestroy": (c_int, (_P,)),
    "cudaGetErrorString": (c_char_p, (c_int,)),
}

NCCL_FLOAT32 = 7
NCCL_SUM, NCCL_MAX, NCCL_MIN = 0, 2, 3  # ncclRedOp_t
CUDA_STREAM_NON_BLOCKING = 1
CUDA_MEMCPY_H2D, CUDA_MEMCPY_D2H = 1, 2  # cudaMemcpyKind


class ProbeError(NcclsimError):
    pass


class Libraries(NamedTuple):
    nccl: Any  # ctypes.CDLL with NCCL's functions declared
    cuda: Any  # the same for the CUDA runtime

    def nccl_check(self, result: int, what: str) -> None:
        if result != 0:
            text = (self.nccl.ncclGetErrorString(result) or b"?").decode()
            raise ProbeError(f"{what} failed: NCCL error {result} ({text})")

    def cuda_check(self, result: int, what: str) -> None:
        if result != 0:
            text = (self.cuda.cudaGetErrorString(result) or b"?").decode()
            raise ProbeError(f"{what} failed: CUDA error {result} ({text})")

    def shared_unique_id(self, root: bool, share: Callable[[Optional[bytes]], bytes]) -> UniqueId:
        """The communicator's id: made by the root (ncclGetUniqueId), whose bytes
        `share` hands every process (an MPI broadcast from the root)."""
        uid = UniqueId()
        if root:
            self.nccl_check(self.nccl.ncclGetUniqueId(uid), "ncclGetUniqueId")
        return UniqueId.from_buffer_copy(share(bytes(uid) if root else None))

    def nccl_version(self) -> str:
        v = c_int()
        self.nccl_check(self.nccl.ncclGetVersion(v), "ncclGetVersion")
        return f"{v.value // 10000}.{v.value % 10000 // 100}.{v.value % 100}"


def _declared(soname: str, functions: dict[str, tuple[Any, tuple[Any, ...]]]) -> ctypes.CDLL:
    lib = ctypes.CDLL(soname)
    for name, (result, arguments) in functions.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = result, arguments
    return lib


def load(nccl: str = "libnccl.so.2", cudart: str = "libcudart.so.12") -> Libraries:
    try:
        return Libraries(_declared(nccl, NCCL), _declared(cudart, CUDART))
    except (OSError, AttributeError) as e:
        raise ProbeError(f"cannot load NCCL or the CUDA runtime ({e}); run under `ncclsim launch` "
                         "or after `eval \"$(ncclsim env)\"`") from e
