"""Checks of the simulated driver, libcuda.so.1, called directly.

Run as `python driver_checks.py CHECK [ARG...]` with LD_LIBRARY_PATH naming
ncclsim's lib directory (and NCCLSIM_PLATFORM where the check needs a
configured platform). The driver is called through cffi in ABI mode with the
declarations below, written from the cuda.h of NVIDIA's runtime wheel. Each
check prints one line `RESULT <json>`; tests/test_driver_api.py and
tests/test_entry_points.py assert on it. An unexpected CUDA error raises, so the
process exits non-zero with the call named in the traceback.

The two-process checks (vmm_*, ipc_*) talk over a Unix stream socket whose
descriptor is passed as an argument: one process exports memory, the other
imports it, and both report what they saw.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import socket
import struct
import sys

import cffi

CDEF = """
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned int CUdeviceptr_v1;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { int type; int id; } CUmemLocation;
typedef struct {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct { unsigned char compressionType; unsigned char gpuDirectRDMACapable;
             unsigned short usage; unsigned char reserved[4]; } allocFlags;
} CUmemAllocationProp;
typedef struct { CUmemLocation location; int flags; } CUmemAccessDesc;

CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev);

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active);
CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuCtxPopCurrent_v2(CUcontext *pctx);
CUresult cuCtxGetDevice(CUdevice *device);

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);
CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr);

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop, int option);
CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                CUmemGenericAllocationHandle handle);
CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      int handleType, unsigned long long flags);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        int shHandleType);

typedef struct { unsigned int numDevices; size_t size; unsigned long long handleTypes;
                 unsigned long long flags; } CUmulticastObjectProp;
CUresult cuMulticastCreate(CUmemGenericAllocationHandle *mcHandle, const CUmulticastObjectProp *prop);
CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle, CUdevice dev);
CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                            CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
                            unsigned long long flags);
CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, size_t size);
CUresult cuMulticastGetGranularity(size_t *granularity, const CUmulticastObjectProp *prop, int option);

CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags);
CUresult cuIpcCloseMemHandle(CUdeviceptr dptr);

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                             unsigned long long flags, int *symbolStatus);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, unsigned long long flags);

typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct { int id; char pad[4]; union { char pad[64]; struct { unsigned x, y, z; } clusterDim; } value; }
    CUlaunchAttribute;
typedef struct { unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
                 CUstream hStream; CUlaunchAttribute *attrs; unsigned numAttrs; } CUlaunchConfig;
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuFuncSetAttribute(CUfunction hfunc, int attrib, int value);
CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func, const CUlaunchConfig *config);
CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config);
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
CUresult cuCtxSynchronize(void);

typedef struct { unsigned char bytes[16]; } CUuuid;
CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId);
CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId);
"""

# cuda.h
CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NOT_INITIALIZED = 0, 2, 3
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11
CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1

MiB = 1 << 20

ffi = cffi.FFI()
ffi.cdef(CDEF)
LIB_PATH = "libcuda.so.1"
cu = ffi.dlopen(LIB_PATH)
assert ffi.sizeof("CUmemAllocationProp") == 32 and ffi.sizeof("CUipcMemHandle") == 64


class CudaError(RuntimeError):
    pass


def err_name(rc: int) -> str:
    s = ffi.new("const char **")
    return ffi.string(s[0]).decode() if cu.cuGetErrorName(rc, s) == 0 and s[0] else "?"


def ck(rc: int, what: str) -> None:
    if rc != CUDA_SUCCESS:
        raise CudaError(f"{what} -> {rc} ({err_name(rc)})")


def addr(p) -> int:
    return int(ffi.cast("uintptr_t", p))


def init_ctx(dev: int = 0):
    ck(cu.cuInit(0), "cuInit")
    ctx = ffi.new("CUcontext *")
    ck(cu.cuDevicePrimaryCtxRetain(ctx, dev), f"cuDevicePrimaryCtxRetain({dev})")
    ck(cu.cuCtxSetCurrent(ctx[0]), "cuCtxSetCurrent")
    return ctx[0]


def mem_alloc(size: int) -> int:
    p = ffi.new("CUdeviceptr *")
    ck(cu.cuMemAlloc_v2(p, size), f"cuMemAlloc({size})")
    return p[0]


def htod(dst: int, data: bytes) -> None:
    ck(cu.cuMemcpyHtoD_v2(dst, data, len(data)), "cuMemcpyHtoD")


def dtoh(src: int, n: int) -> bytes:
    buf = ffi.new("char[]", n)
    ck(cu.cuMemcpyDtoH_v2(buf, src, n), "cuMemcpyDtoH")
    return bytes(ffi.buffer(buf))


def pattern(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def vmm_prop(dev: int, exportable: bool = True):
    prop = ffi.new("CUmemAllocationProp *")
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR if exportable else 0
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = dev
    return prop


def reserve_and_map(handle: int, size: int, dev: int) -> int:
    va = ffi.new("CUdeviceptr *")
    ck(cu.cuMemAddressReserve(va, size, 0, 0, 0), "cuMemAddressReserve")
    ck(cu.cuMemMap(va[0], size, 0, handle, 0), "cuMemMap")
    desc = ffi.new("CUmemAccessDesc *")
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE
    desc.location.id = dev
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    ck(cu.cuMemSetAccess(va[0], size, desc, 1), "cuMemSetAccess")
    return va[0]


def unmap_and_free(va: int, size: int) -> None:
    ck(cu.cuMemUnmap(va, size), "cuMemUnmap")
    ck(cu.cuMemAddressFree(va, size), "cuMemAddressFree")


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"peer closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


# ---- two processes: VMM export/import of a POSIX file descriptor ----

VMM_SIZE = 4 * MiB  # two 2 MiB granules
REPLY_OFFSET = 3 * MiB
REPLY_LEN = 4096


def check_vmm_export(sock_fd: str, seed: str, dev: str) -> dict:
    """Process A: cuMemCreate on `dev`, map, write a pattern, export the fd, send it."""
    seed_i, dev_i = int(seed), int(dev)
    sock = socket.socket(fileno=int(sock_fd))
    init_ctx(dev_i)
    gran = ffi.new("size_t *")
    prop = vmm_prop(dev_i)
    ck(cu.cuMemGetAllocationGranularity(gran, prop, 0), "cuMemGetAllocationGranularity")
    assert VMM_SIZE % gran[0] == 0, gran[0]
    handle = ffi.new("CUmemGenericAllocationHandle *")
    ck(cu.cuMemCreate(handle, VMM_SIZE, prop, 0), "cuMemCreate")
    va = reserve_and_map(handle[0], VMM_SIZE, dev_i)
    data = pattern(seed_i, VMM_SIZE)
    ffi.memmove(ffi.cast("char *", va), data, VMM_SIZE)
    fd = ffi.new("int *", -1)
    ck(cu.cuMemExportToShareableHandle(fd, handle[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
       "cuMemExportToShareableHandle")
    socket.send_fds(sock, [struct.pack("<Q", VMM_SIZE)], [fd[0]])
    os.close(fd[0])
    done = recv_exact(sock, 4)
    reply = bytes(ffi.buffer(ffi.cast("char *", va + REPLY_OFFSET), REPLY_LEN))
    untouched = bytes(ffi.buffer(ffi.cast("char *", va), REPLY_OFFSET)) == data[:REPLY_OFFSET]
    unmap_and_free(va, VMM_SIZE)
    ck(cu.cuMemRelease(handle[0]), "cuMemRelease")
    return {"done": done.decode(), "reply_ok": reply == pattern(seed_i + 1, REPLY_LEN),
            "rest_unchanged": untouched, "granularity": gran[0]}


def check_vmm_import(sock_fd: str, seed: str, dev: str) -> dict:
    """Process B: receive the fd, import, map on `dev`, read A's bytes, write a reply."""
    seed_i, dev_i = int(seed), int(dev)
    sock = socket.socket(fileno=int(sock_fd))
    init_ctx(dev_i)
    msg, fds, _, _ = socket.recv_fds(sock, 8, 1)
    (size,) = struct.unpack("<Q", msg)
    assert len(fds) == 1, fds
    handle = ffi.new("CUmemGenericAllocationHandle *")
    ck(cu.cuMemImportFromShareableHandle(handle, ffi.cast("void *", fds[0]),
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
       "cuMemImportFromShareableHandle")
    os.close(fds[0])  # the driver keeps its own reference
    prop = ffi.new("CUmemAllocationProp *")
    ck(cu.cuMemGetAllocationPropertiesFromHandle(prop, handle[0]),
       "cuMemGetAllocationPropertiesFromHandle")
    va = reserve_and_map(handle[0], size, dev_i)
    got = bytes(ffi.buffer(ffi.cast("char *", va), size))
    ffi.memmove(ffi.cast("char *", va + REPLY_OFFSET), pattern(seed_i + 1, REPLY_LEN), REPLY_LEN)
    base, rsize = ffi.new("CUdeviceptr *"), ffi.new("size_t *")
    ck(cu.cuMemGetAddressRange_v2(base, rsize, va + 12345), "cuMemGetAddressRange(imported)")
    sock.sendall(b"done")
    unmap_and_free(va, size)
    ck(cu.cuMemRelease(handle[0]), "cuMemRelease")
    return {"size": size, "data_ok": got == pattern(seed_i, size),
            "prop": {"type": prop.type, "location_type": prop.location.type,
                     "location_id": prop.location.id},
            "range": [base[0] - va, rsize[0]]}


# ---- two processes: a multicast object (NVLS) ----

CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132
CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED = 1, 801
MC_SIZE = 4 * MiB


def mc_prop(ndev: int, size: int = MC_SIZE):
    prop = ffi.new("CUmulticastObjectProp *")
    prop.numDevices = ndev
    prop.size = size
    prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    return prop


def mc_join(mc: int, dev: int) -> tuple[int, int]:
    """Add `dev`, bind 2 MiB of its memory at offset 2 MiB of the object (waits
    for the whole team), map the object; returns (memory handle, mapping)."""
    ck(cu.cuMulticastAddDevice(mc, dev), "cuMulticastAddDevice")
    mem = ffi.new("CUmemGenericAllocationHandle *")
    ck(cu.cuMemCreate(mem, 2 * MiB, vmm_prop(dev), 0), "cuMemCreate")
    ck(cu.cuMulticastBindMem(mc, 2 * MiB, mem[0], 0, 2 * MiB, 0), "cuMulticastBindMem")
    return mem[0], reserve_and_map(mc, MC_SIZE, dev)


def mc_leave(mc: int, mem: int, va: int, dev: int) -> dict:
    again = cu.cuMulticastBindMem(mc, 2 * MiB, mem, 0, 2 * MiB, 0)  # that range is bound already
    ck(cu.cuMulticastUnbind(mc, dev, 2 * MiB, 2 * MiB), "cuMulticastUnbind")
    unbound_twice = cu.cuMulticastUnbind(mc, dev, 2 * MiB, 2 * MiB)
    unmap_and_free(va, MC_SIZE)
    ck(cu.cuMemRelease(mem), "cuMemRelease")
    ck(cu.cuMemRelease(mc), "cuMemRelease(multicast)")
    return {"bind_again": again, "unbind_twice": unbound_twice}


def check_mc_create(sock_fd: str, dev: str) -> dict:
    """Process A: the multicast attribute, granularity, cuMulticastCreate for a
    team of two, its POSIX fd to process B, then join the team itself."""
    dev_i = int(dev)
    sock = socket.socket(fileno=int(sock_fd))
    init_ctx(dev_i)
    attr = ffi.new("int *")
    ck(cu.cuDeviceGetAttribute(attr, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev_i), "cuDeviceGetAttribute")
    gran = ffi.new("size_t *")
    ck(cu.cuMulticastGetGranularity(gran, mc_prop(2), 1), "cuMulticastGetGranularity")
    mc = ffi.new("CUmemGenericAllocationHandle *")
    odd = cu.cuMulticastCreate(mc, mc_prop(2, MC_SIZE + 4096))
    ck(cu.cuMulticastCreate(mc, mc_prop(2)), "cuMulticastCreate")
    fd = ffi.new("int *", -1)
    ck(cu.cuMemExportToShareableHandle(fd, mc[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
       "cuMemExportToShareableHandle(multicast)")
    socket.send_fds(sock, [b"mc"], [fd[0]])
    os.close(fd[0])
    mem, va = mc_join(mc[0], dev_i)
    recv_exact(sock, 4)  # B is bound too
    third = cu.cuMulticastAddDevice(mc[0], 2)  # the team is full
    out = mc_leave(mc[0], mem, va, dev_i)
    return {"attribute": attr[0], "granularity": gran[0], "odd_size": odd, "third_device": third, **out}


def check_mc_join(sock_fd: str, dev: str) -> dict:
    """Process B: import the object from A's fd and join the team."""
    dev_i = int(dev)
    sock = socket.socket(fileno=int(sock_fd))
    init_ctx(dev_i)
    _, fds, _, _ = socket.recv_fds(sock, 8, 1)
    mc = ffi.new("CUmemGenericAllocationHandle *")
    ck(cu.cuMemImportFromShareableHandle(mc, ffi.cast("void *", fds[0]), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
       "cuMemImportFromShareableHandle(multicast)")
    os.close(fds[0])
    mem, va = mc_join(mc[0], dev_i)
    twice = cu.cuMulticastAddDevice(mc[0], dev_i)
    sock.sendall(b"done")
    return {"add_twice": twice, **mc_leave(mc[0], mem, va, dev_i)}


def check_mc_unsupported() -> dict:
    """A platform without multicast: the attribute says 0 and objects cannot be made."""
    init_ctx(0)
    attr = ffi.new("int *")
    ck(cu.cuDeviceGetAttribute(attr, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0), "cuDeviceGetAttribute")
    mc = ffi.new("CUmemGenericAllocationHandle *")
    return {"attribute": attr[0], "create": cu.cuMulticastCreate(mc, mc_prop(1))}


# ---- two processes: legacy IPC handles ----

IPC_SIZE = MiB + 4096 + 17


def check_ipc_export(sock_fd: str, seed: str) -> dict:
    sock = socket.socket(fileno=int(sock_fd))
    init_ctx(4)
    p = mem_alloc(IPC_SIZE)
    htod(p, pattern(int(seed), IPC_SIZE))
    h = ffi.new("CUipcMemHandle *")
    ck(cu.cuIpcGetMemHandle(h, p), "cuIpcGetMemHandle")
    sock.sendall(bytes(ffi.buffer(h)))
    done = recv_exact(sock, 4)
    reply = dtoh(p, 4096)
    ck(cu.cuMemFree_v2(p), "cuMemFree")
    return {"done": done.decode(), "reply_ok": reply == pattern(int(seed) + 1, 4096)}


def check_ipc_import(sock_fd: str, seed: str) -> dict:
    sock = socket.socket(fileno=int(sock_fd))
    init_ctx(0)
    raw = recv_exact(sock, 64)
    h = ffi.new("CUipcMemHandle *")
    ffi.memmove(h, raw, 64)
    p = ffi.new("CUdeviceptr *")
    ck(cu.cuIpcOpenMemHandle_v2(p, h[0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
    got = dtoh(p[0], IPC_SIZE)
    ordinal = ffi.new("int *", -1)
    ck(cu.cuPointerGetAttribute(ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p[0]),
       "cuPointerGetAttribute(DEVICE_ORDINAL)")
    htod(p[0], pattern(int(seed) + 1, 4096))
    ck(cu.cuIpcCloseMemHandle(p[0]), "cuIpcCloseMemHandle")
    sock.sendall(b"done")
    return {"data_ok": got == pattern(int(seed), IPC_SIZE), "owner_device": ordinal[0]}


# ---- one process ----

def check_ipc_same_process() -> dict:
    init_ctx(1)
    p = mem_alloc(3 * 4096)
    data = pattern(7, 3 * 4096)
    htod(p, data)
    h = ffi.new("CUipcMemHandle *")
    ck(cu.cuIpcGetMemHandle(h, p), "cuIpcGetMemHandle")
    q = ffi.new("CUdeviceptr *")
    ck(cu.cuIpcOpenMemHandle_v2(q, h[0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
    same = dtoh(q[0], len(data)) == data
    ck(cu.cuIpcCloseMemHandle(q[0]), "cuIpcCloseMemHandle")
    still = dtoh(p, len(data)) == data  # closing the opened handle left the allocation alone
    ck(cu.cuMemFree_v2(p), "cuMemFree")
    return {"content_same": same, "alloc_intact_after_close": still}


def check_address_range() -> dict:
    init_ctx(2)
    size = 5 * MiB + 300
    p = mem_alloc(size)
    base, rsize = ffi.new("CUdeviceptr *"), ffi.new("size_t *")
    ck(cu.cuMemGetAddressRange_v2(base, rsize, p + 3 * MiB + 7), "cuMemGetAddressRange")
    start = ffi.new("CUdeviceptr *")
    ck(cu.cuPointerGetAttribute(start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + size - 1),
       "cuPointerGetAttribute(RANGE_START_ADDR)")
    psize = ffi.new("size_t *")
    ck(cu.cuPointerGetAttribute(psize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 1),
       "cuPointerGetAttribute(RANGE_SIZE)")
    mtype, ordinal = ffi.new("unsigned *"), ffi.new("int *")
    ck(cu.cuPointerGetAttribute(mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p), "MEMORY_TYPE")
    ck(cu.cuPointerGetAttribute(ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p), "DEVICE_ORDINAL")
    local = ffi.new("char[64]")
    unknown = cu.cuMemGetAddressRange_v2(base, rsize, addr(local))
    ck(cu.cuMemFree_v2(p), "cuMemFree")
    after_free = cu.cuMemGetAddressRange_v2(ffi.new("CUdeviceptr *"), ffi.new("size_t *"), p + 7)
    return {"ptr": p, "base": base[0], "size": rsize[0], "start": start[0], "attr_size": psize[0],
            "memory_type": mtype[0], "ordinal": ordinal[0], "unknown_rc": unknown,
            "after_free_rc": after_free, "requested": size}


def check_vmm_map_outside_reservation() -> dict:
    """cuMemMap onto address space that cuMemAddressReserve did not hand out.

    Laid out so that a driver which maps anyway only overwrites memory this
    check owns: a 16 MiB anonymous region M, with an 8 MiB hole punched at a
    2 MiB-aligned B; the reservation is asked for at B (4 MiB), so [B+4, B+8)
    MiB stays a hole and [B+8, ...) MiB is M's memory, filled with 0x77."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    PROT_RW, MAP_PRIVATE_ANON = 0x1 | 0x2, 0x02 | 0x20
    init_ctx(0)
    m = libc.mmap(None, 16 * MiB, PROT_RW, MAP_PRIVATE_ANON, -1, 0)
    assert m not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    b = (m + 2 * MiB - 1) & ~(2 * MiB - 1)
    live = b + 8 * MiB  # M's own memory: 2 MiB of it at least
    ctypes.memset(live, 0x77, 2 * MiB)
    assert libc.munmap(b, 8 * MiB) == 0
    va = ffi.new("CUdeviceptr *")
    ck(cu.cuMemAddressReserve(va, 4 * MiB, 0, b, 0), "cuMemAddressReserve")
    handle = ffi.new("CUmemGenericAllocationHandle *")
    ck(cu.cuMemCreate(handle, 4 * MiB, vmm_prop(0), 0), "cuMemCreate")
    res = {"placed_at_hint": va[0] == b}
    if va[0] != b:
        return res
    for key, ptr, size in (("past_end", b + 2 * MiB, 4 * MiB),  # 2 MiB beyond the reservation
                           ("hole", b + 4 * MiB, 2 * MiB),  # free address space
                           ("live", live, 2 * MiB)):  # memory the process is using
        rc = cu.cuMemMap(ptr, size, 0, handle[0], 0)
        res[key] = rc
        if key == "live":  # read before any unmap: that would leave PROT_NONE there
            res["live_intact"] = ctypes.string_at(live, 2 * MiB) == b"\x77" * (2 * MiB)
        if rc == CUDA_SUCCESS:
            cu.cuMemUnmap(ptr, size)
    # Mapping inside the reservation still works.
    res["inside"] = cu.cuMemMap(b, 4 * MiB, 0, handle[0], 0)
    if res["inside"] == CUDA_SUCCESS:
        ck(cu.cuMemUnmap(b, 4 * MiB), "cuMemUnmap")
    ck(cu.cuMemRelease(handle[0]), "cuMemRelease")
    return res


def check_capacity() -> dict:
    """The platform gives device 0 `memory` bytes; allocations must respect it."""
    init_ctx(0)
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    ck(cu.cuMemGetInfo_v2(free, total), "cuMemGetInfo")
    cap = total[0]
    first_size = cap * 6 // 10
    p1 = mem_alloc(first_size)
    q = ffi.new("CUdeviceptr *")
    second = cu.cuMemAlloc_v2(q, first_size)
    # VMM physical memory draws on the same capacity.
    h = ffi.new("CUmemGenericAllocationHandle *")
    vmm_size = (first_size // (2 * MiB) + 1) * 2 * MiB
    vmm = cu.cuMemCreate(h, vmm_size, vmm_prop(0, exportable=False), 0)
    ck(cu.cuMemFree_v2(p1), "cuMemFree")
    retry = cu.cuMemAlloc_v2(q, first_size)
    if retry == CUDA_SUCCESS:
        ck(cu.cuMemFree_v2(q[0]), "cuMemFree")
    vmm_retry = cu.cuMemCreate(h, vmm_size, vmm_prop(0, exportable=False), 0)
    if vmm_retry == CUDA_SUCCESS:
        ck(cu.cuMemRelease(h[0]), "cuMemRelease")
    ck(cu.cuMemGetInfo_v2(free, total), "cuMemGetInfo")
    # The other device's capacity is independent.
    ctx1 = ffi.new("CUcontext *")
    ck(cu.cuDevicePrimaryCtxRetain(ctx1, 1), "cuDevicePrimaryCtxRetain(1)")
    ck(cu.cuCtxSetCurrent(ctx1[0]), "cuCtxSetCurrent(1)")
    other = ffi.new("CUdeviceptr *")
    other_rc = cu.cuMemAlloc_v2(other, first_size)
    return {"total": cap, "second_rc": second, "vmm_rc": vmm, "retry_rc": retry,
            "vmm_retry_rc": vmm_retry, "free_end": free[0], "other_device_rc": other_rc}


def check_contexts() -> dict:
    res: dict = {}
    n = ffi.new("int *")
    res["count_before_init"] = cu.cuDeviceGetCount(n)
    ck(cu.cuInit(0), "cuInit")
    ck(cu.cuDeviceGetCount(n), "cuDeviceGetCount")
    res["count"] = n[0]
    v = ffi.new("int *")
    ck(cu.cuDriverGetVersion(v), "cuDriverGetVersion")
    res["driver_version"] = v[0]

    flags, active = ffi.new("unsigned *"), ffi.new("int *")

    def state(dev: int) -> list:
        ck(cu.cuDevicePrimaryCtxGetState(dev, flags, active), "cuDevicePrimaryCtxGetState")
        return [flags[0], active[0]]

    c0, c0b, c1 = ffi.new("CUcontext *"), ffi.new("CUcontext *"), ffi.new("CUcontext *")
    res["state_initial"] = state(0)
    ck(cu.cuDevicePrimaryCtxSetFlags_v2(0, 4), "cuDevicePrimaryCtxSetFlags(4)")
    res["state_after_flags"] = state(0)
    ck(cu.cuDevicePrimaryCtxRetain(c0, 0), "retain 0")
    res["state_retained"] = state(0)
    ck(cu.cuDevicePrimaryCtxRetain(c0b, 0), "retain 0 again")
    res["same_primary"] = c0[0] == c0b[0]
    ck(cu.cuDevicePrimaryCtxRetain(c1, 1), "retain 1")
    res["distinct_devices"] = c0[0] != c1[0]
    ck(cu.cuDevicePrimaryCtxRelease_v2(0), "release 0")
    res["state_one_release"] = state(0)
    ck(cu.cuDevicePrimaryCtxRelease_v2(0), "release 0 again")
    res["state_released"] = state(0)
    res["release_unretained"] = cu.cuDevicePrimaryCtxRelease_v2(0)
    ck(cu.cuDevicePrimaryCtxRetain(c0, 0), "retain 0 (third)")

    cur, dev = ffi.new("CUcontext *"), ffi.new("CUdevice *")

    def current() -> str:
        ck(cu.cuCtxGetCurrent(cur), "cuCtxGetCurrent")
        return {addr(c0[0]): "c0", addr(c1[0]): "c1", 0: "none"}.get(addr(cur[0]), "other")

    res["current_initial"] = current()
    res["get_device_no_ctx"] = cu.cuCtxGetDevice(dev)
    ck(cu.cuCtxPushCurrent_v2(c0[0]), "push c0")
    res["after_push_c0"] = current()
    ck(cu.cuCtxPushCurrent_v2(c1[0]), "push c1")
    res["after_push_c1"] = current()
    ck(cu.cuCtxGetDevice(dev), "cuCtxGetDevice")
    res["device_top"] = dev[0]
    popped = ffi.new("CUcontext *")
    ck(cu.cuCtxPopCurrent_v2(popped), "pop")
    res["popped_first"] = popped[0] == c1[0]
    res["after_pop"] = current()
    ck(cu.cuCtxPopCurrent_v2(popped), "pop")
    res["popped_second"] = popped[0] == c0[0]
    res["after_pop_all"] = current()
    res["pop_empty"] = cu.cuCtxPopCurrent_v2(popped)

    d = ffi.new("CUdevice *")
    res["device_get_bad"] = cu.cuDeviceGet(d, n[0])
    res["device_get_negative"] = cu.cuDeviceGet(d, -1)
    res["attribute_bad"] = cu.cuDeviceGetAttribute(v, 75, n[0])
    res["retain_bad"] = cu.cuDevicePrimaryCtxRetain(c0b, n[0])
    name = ffi.new("char[128]")
    res["name_bad"] = cu.cuDeviceGetName(name, 128, n[0])
    ck(cu.cuDeviceGetName(name, 128, n[0] - 1), "cuDeviceGetName(last)")
    res["name_last"] = ffi.string(name).decode()
    return res


def check_proc_address_unknown() -> dict:
    fn = ffi.new("void **")
    status = ffi.new("int *", -1)
    res = {}
    for key, sym, ver in [("graph", "cuGraphCreate", 12090), ("bogus", "cuNoSuchCall", 12090),
                          ("too_old", "cuMemCreate", 9000), ("ok", "cuMemCreate", 12090)]:
        fn[0] = ffi.cast("void *", 1)
        status[0] = -1
        rc = cu.cuGetProcAddress_v2(sym.encode(), fn, ver, 0, status)
        res[key] = [rc, status[0], addr(fn[0])]
    # An API function the simulated GPU does not offer answers when called.
    graph = ffi.new("void **")
    assert cu.cuGetProcAddress_v2(b"cuGraphCreate", graph, 12090, 0, ffi.NULL) == 0
    res["graph_call"] = ffi.cast("int (*)(void *, unsigned)", graph[0])(ffi.new("void **"), 0)
    return res


# ---- occupancy of thread-block clusters ----

CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH = 11  # then HEIGHT, DEPTH
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4


def launch_config(grid: int, block: int, smem: int = 0, cluster: tuple = ()):
    """A CUlaunchConfig (kept alive with its attribute) of a 1-D grid, with a
    cluster dimension attribute when `cluster` is given."""
    attr = ffi.new("CUlaunchAttribute[1]")
    cfg = ffi.new("CUlaunchConfig *", {"gridDimX": grid, "gridDimY": 1, "gridDimZ": 1, "blockDimX": block,
                                       "blockDimY": 1, "blockDimZ": 1, "sharedMemBytes": smem})
    if cluster:
        attr[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr[0].value.clusterDim.x, attr[0].value.clusterDim.y, attr[0].value.clusterDim.z = cluster
        cfg.attrs, cfg.numAttrs = attr, 1
    return cfg, attr


def some_function(name: bytes = b"kernel"):
    mod = ffi.new("CUmodule *")
    ck(cu.cuModuleLoadData(mod, b"image"), "cuModuleLoadData")
    f = ffi.new("CUfunction *")
    ck(cu.cuModuleGetFunction(f, mod[0], name), "cuModuleGetFunction")
    return f[0]


def cluster_answers(f, grid: int, block: int, smem: int, cluster: tuple = ()) -> list:
    """[rc, value] of cuOccupancyMaxPotentialClusterSize and of cuOccupancyMaxActiveClusters."""
    cfg, _attr = launch_config(grid, block, smem, cluster)
    out = ffi.new("int *", -1)
    rc = cu.cuOccupancyMaxPotentialClusterSize(out, f, cfg)
    potential = [rc, out[0]]
    out[0] = -1
    rc = cu.cuOccupancyMaxActiveClusters(out, f, cfg)
    return [potential, [rc, out[0]]]


def active_clusters(f, cluster: tuple, smem: int = 200 * 1024, block: int = 128) -> list:
    return cluster_answers(f, 132, block, smem, cluster)[1]


def check_cluster_occupancy() -> dict:
    """Cluster occupancy of a program's function on device 0 of the platform
    (built-in: H100, 132 SMs), and what cuLaunchKernelEx accepts."""
    init_ctx(0)
    f = some_function()
    res = {}
    # 128 threads: 8 blocks per SM (64 registers a thread); clusters of up to 8 blocks.
    res["potential_portable"], res["no_shape"] = cluster_answers(f, 132, 128, 0)
    # 200 KiB of shared memory: one block per SM, so one cluster of 2 per 2 SMs...
    res["pairs"] = active_clusters(f, (2, 1, 1))
    res["eights"] = active_clusters(f, (8, 1, 1))
    res["sixteen_portable"] = active_clusters(f, (16, 1, 1))
    res["launch_sixteen_portable"] = launch_ex(f, 16, (16, 1, 1))
    ck(cu.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1), "non-portable")
    res["potential_non_portable"] = cluster_answers(f, 132, 128, 0)[0]
    res["sixteen"] = active_clusters(f, (16, 1, 1))  # ...and one of 16 per GPC
    res["seventeen"] = active_clusters(f, (17, 1, 1))
    res["empty_shape"] = active_clusters(f, (0, 1, 1))
    res["launch_sixteen"] = launch_ex(f, 16, (16, 1, 1))
    res["launch_grid_not_multiple"] = launch_ex(f, 3, (2, 1, 1))
    # More shared memory than an SM has: nothing fits.
    res["too_much_smem"] = cluster_answers(f, 132, 128, 300 * 1024, (2, 1, 1))
    # A function that requires clusters of 2x1x1: the configuration may only repeat it.
    g = some_function(b"clustered")
    for i, v in enumerate((2, 1, 1)):
        ck(cu.cuFuncSetAttribute(g, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH + i, v), "required cluster")
    res["required_potential"], res["required_active"] = cluster_answers(g, 132, 128, 200 * 1024)
    res["required_other_shape"] = active_clusters(g, (4, 1, 1))
    res["launch_required_odd_grid"] = launch_ex(g, 3)
    res["launch_required"] = launch_ex(g, 4)
    # Invalid arguments.
    cfg, _attr = launch_config(132, 128, 0, (2, 1, 1))
    out = ffi.new("int *")
    res["null_out"] = cu.cuOccupancyMaxActiveClusters(ffi.NULL, f, cfg)
    res["null_config"] = cu.cuOccupancyMaxPotentialClusterSize(out, f, ffi.NULL)
    res["bad_function"] = cu.cuOccupancyMaxActiveClusters(out, ffi.cast("CUfunction", 0), cfg)
    res["zero_block"] = cluster_answers(f, 132, 0, 0, (2, 1, 1))
    ck(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    popped = ffi.new("CUcontext *")
    ck(cu.cuCtxPopCurrent_v2(popped), "cuCtxPopCurrent")
    res["no_context"] = cluster_answers(f, 132, 128, 0, (2, 1, 1))
    return res


def launch_ex(f, grid: int, cluster: tuple = ()) -> int:
    cfg, _attr = launch_config(grid, 128, 0, cluster)
    return cu.cuLaunchKernelEx(cfg, f, ffi.NULL, ffi.NULL)


def check_cluster_unsupported() -> dict:
    """A GPU without clusters (the platform's, e.g. A100) answers NOT_SUPPORTED."""
    init_ctx(0)
    return {"answers": cluster_answers(some_function(), 108, 128, 0, (2, 1, 1))}


# ---- private export tables for tools (cuBLASLt calls them) ----

TOOLS_TLS = "42d85a8123f6cb478298f6e78a3aecdc"
TOOLS_CONTEXT = "21318c60971432488ca641ff7324c8f2"
CLUSTER_PROTOTYPE = "1734dc26800d47458726c0f1e7dd8bca"


def export_table(uuid_hex: str):
    """The table's slots (slot 0: its size in bytes), or the lookup's error code."""
    uuid = ffi.new("CUuuid *")
    uuid.bytes = bytes.fromhex(uuid_hex)
    table = ffi.new("const void **")
    rc = cu.cuGetExportTable(table, uuid)
    return ffi.cast("void **", table[0]) if rc == CUDA_SUCCESS else rc


def slot(table, i: int, signature: str):
    return ffi.cast(signature, table[i])


def check_tools_tables() -> dict:
    """TOOLS_TLS [1] set / [2] get the current context, TOOLS_CONTEXT [3] a
    context's device / [4] its id, CLUSTER_PROTOTYPE [4] the TPC layout / [8]
    cluster launch support, on the built-in 8-GPU H100 platform."""
    tls, tctx, clu = export_table(TOOLS_TLS), export_table(TOOLS_CONTEXT), export_table(CLUSTER_PROTOTYPE)
    set_cur = slot(tls, 1, "CUresult (*)(CUcontext)")
    get_cur = slot(tls, 2, "CUresult (*)(CUcontext *)")
    get_dev = slot(tctx, 3, "CUresult (*)(CUcontext, unsigned int *)")
    get_id = slot(tctx, 4, "CUresult (*)(CUcontext, unsigned long long *)")
    tpc_map = slot(clu, 4, "CUresult (*)(unsigned char **, unsigned char **)")
    launch_ok = slot(clu, 8, "CUresult (*)(CUdevice, int *)")
    res = {"sizes": [int(ffi.cast("uintptr_t", t[0])) for t in (tls, tctx, clu)]}
    cur = ffi.new("CUcontext *")
    res["get_before_init"] = get_cur(cur)
    ck(cu.cuInit(0), "cuInit")
    cur[0] = ffi.cast("CUcontext", 1)
    res["get_none"] = [get_cur(cur), addr(cur[0])]
    res["get_null"] = get_cur(ffi.NULL)
    c1 = init_ctx(1)
    res["get_current"] = [get_cur(cur), cur[0] == c1]
    c2 = ffi.new("CUcontext *")
    ck(cu.cuDevicePrimaryCtxRetain(c2, 2), "cuDevicePrimaryCtxRetain(2)")
    res["set"] = set_cur(c2[0])
    seen = ffi.new("CUcontext *")
    ck(cu.cuCtxGetCurrent(seen), "cuCtxGetCurrent")
    res["set_seen"] = [seen[0] == c2[0], get_cur(cur), cur[0] == c2[0]]
    dev = ffi.new("unsigned int *", 99)
    res["device"] = [[get_dev(c, dev), dev[0]] for c in (c1, c2[0])]
    ids, public = ffi.new("unsigned long long *"), ffi.new("unsigned long long *")
    res["id"] = []
    for c in (c1, c2[0]):
        rc = get_id(c, ids)
        ck(cu.cuCtxGetId(c, public), "cuCtxGetId")
        res["id"].append([rc, ids[0] == public[0]])
    res["ids_differ"] = get_id(c1, ids) == 0 and get_id(c2[0], public) == 0 and ids[0] != public[0]
    res["null_context"] = [get_dev(ffi.NULL, dev), get_id(ffi.NULL, ids)]
    res["null_out"] = [get_dev(c1, ffi.NULL), get_id(c1, ffi.NULL)]
    res["other_slot"] = ffi.cast("CUresult (*)(void)", tctx[1])()
    vgpc = ffi.new("unsigned char **", ffi.cast("unsigned char *", 1))
    mtpc = ffi.new("unsigned char **", ffi.cast("unsigned char *", 1))
    res["tpc_mapping"] = [tpc_map(vgpc, mtpc), addr(vgpc[0]), addr(mtpc[0])]
    flag = ffi.new("int *", -1)
    res["cluster_launch"] = [launch_ok(0, flag), flag[0]]
    res["cluster_launch_bad"] = [launch_ok(8, flag), launch_ok(0, ffi.NULL)]
    return res


def check_cluster_launch_unsupported() -> dict:
    """CLUSTER_PROTOTYPE [8] on a GPU without clusters (the platform's, e.g. A100)."""
    ck(cu.cuInit(0), "cuInit")
    flag = ffi.new("int *", -1)
    rc = slot(export_table(CLUSTER_PROTOTYPE), 8, "CUresult (*)(CUdevice, int *)")(0, flag)
    return {"cluster_launch": [rc, flag[0]]}


# ---- entry points: cuGetProcAddress vs dlsym (queries as JSON on stdin) ----

def check_proc_address() -> dict:
    """stdin: {"symbols": [...], "queries": [[name, version, flags], ...]}.
    Returns each symbol's dlsym address (0 when not exported) and, per query,
    [rc, status, address] from cuGetProcAddress_v2 and [rc, address] from
    cuGetProcAddress (v1); "call": [[name, version], ...] are looked up and
    called without arguments, their results in "called"."""
    req = json.load(sys.stdin)
    dl = ctypes.CDLL(LIB_PATH)
    symbols = {}
    for s in req["symbols"]:
        try:
            symbols[s] = ctypes.cast(getattr(dl, s), ctypes.c_void_p).value or 0
        except AttributeError:
            symbols[s] = 0
    fn = ffi.new("void **")
    status = ffi.new("int *")
    v2, v1, called = [], [], []
    for name, version in req.get("call", []):  # functions called with no arguments
        fn[0] = ffi.NULL
        rc = cu.cuGetProcAddress_v2(name.encode(), fn, version, 0, status)
        called.append(ffi.cast("int (*)(void)", fn[0])() if rc == 0 else None)
    for name, version, flags in req["queries"]:
        fn[0] = ffi.NULL
        status[0] = -1
        rc = cu.cuGetProcAddress_v2(name.encode(), fn, version, flags, status)
        v2.append([rc, status[0], addr(fn[0])])
        fn[0] = ffi.NULL
        rc = cu.cuGetProcAddress(name.encode(), fn, version, flags)
        v1.append([rc, addr(fn[0])])
    return {"symbols": symbols, "v2": v2, "v1": v1, "called": called}


def check_unsupported_exported() -> dict:
    """Functions the simulated GPU does not offer are exported as a real
    libcuda.so.1 exports them (libraries dlsym some): each symbol is the
    function cuGetProcAddress gives for its ABI version and answers
    NOT_SUPPORTED; simulated functions keep their implementation."""
    dl = ctypes.CDLL(LIB_PATH)

    def sym(name: str) -> int:
        try:
            return ctypes.cast(getattr(dl, name), ctypes.c_void_p).value or 0
        except AttributeError:
            return 0

    def proc(name: str, version: int) -> int:
        fn = ffi.new("void **")
        assert cu.cuGetProcAddress_v2(name.encode(), fn, version, 0, ffi.NULL) == 0, name
        return addr(fn[0])

    ck(cu.cuInit(0), "cuInit")
    res = {}
    for symbol, name, version in [("cuTensorMapEncodeTiled", "cuTensorMapEncodeTiled", 12000),
                                  ("cuLinkCreate", "cuLinkCreate", 5050),
                                  ("cuLinkCreate_v2", "cuLinkCreate", 6050),
                                  ("cuStreamBeginCapture_v2", "cuStreamBeginCapture", 10010),
                                  ("cuTexRefSetAddress2D_v3", "cuTexRefSetAddress2D", 4010),
                                  ("cuMemFree", "cuMemFree", 2000),          # the 32-bit ABI
                                  ("cuMemFree_v2", "cuMemFree", 3020)]:      # simulated
        a = sym(symbol)
        res[symbol] = {"same_as_proc": a != 0 and a == proc(name, version),
                       "called": ffi.cast("int (*)(void)", a)() if a and symbol != "cuMemFree_v2" else None}
    res["not_an_abi"] = sym("cuTensorMapEncodeTiled_v2")
    return res


# ---- the host's process directory that NVML's process listings read ----

def check_processes_published() -> dict:
    """This process's file beside the platform file: after a context on device 1,
    after 1 MiB there, after freeing it."""
    own = os.path.join(os.path.dirname(os.environ["NCCLSIM_PLATFORM"]), "processes", str(os.getpid()))
    seen = {}
    def lines() -> list[list[str]]:
        return [line.split() for line in open(own).read().splitlines()]
    init_ctx(1)
    seen["context"] = lines()
    p = mem_alloc(1 << 20)
    seen["allocated"] = lines()
    ck(cu.cuMemFree_v2(p), "cuMemFree")
    seen["freed"] = lines()
    return seen


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}

if __name__ == "__main__":
    result = CHECKS[sys.argv[1]](*sys.argv[2:])
    print("RESULT " + json.dumps(result), flush=True)
