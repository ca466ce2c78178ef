"""Checks of the simulated driver through NVIDIA's real CUDA runtime (libcudart.so.12).

Run as `python cudart_checks.py CHECK [ARG]` with LD_LIBRARY_PATH naming
ncclsim's lib directory (libcuda.so.1) and the runtime wheel's lib directory,
and NCCLSIM_PLATFORM where the check needs a configured platform. The runtime is
driven through cffi in ABI mode with the declarations below (from the wheel's
cuda_runtime_api.h / driver_types.h). Each check prints one line
`RESULT <json>` with its observations; tests/test_cudart.py asserts on them.
An unexpected CUDA error raises, so the process exits non-zero with the call
named in the traceback.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time

import cffi
from proc_status import status_kib

CDEF = """
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef void (*cudaHostFn_t)(void *userData);
struct cudaPointerAttributes { int type; int device; void *devicePointer; void *hostPointer; };

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaDeviceGetAttribute(int *value, int attr, int device);
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device);
cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId);
cudaError_t cudaGetDeviceProperties_v2(void *prop, int device);
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaRuntimeGetVersion(int *version);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaDeviceSynchronize(void);

cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, int kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind, cudaStream_t stream);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr);
cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice);
cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags);
cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count);
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);
"""

# driver_types.h
H2D, D2H, D2D, DEFAULT = 1, 2, 3, 4
ATTR_PCI_BUS, ATTR_PCI_DEVICE, ATTR_PCI_DOMAIN = 33, 34, 50
ATTR_CC_MAJOR, ATTR_CC_MINOR, ATTR_SM_COUNT = 75, 76, 16
STREAM_NON_BLOCKING = 1
NOT_READY = 600  # cudaErrorNotReady
HOST_ALLOC_MAPPED = 2
# struct cudaDeviceProp (CUDA 12.x, cudaGetDeviceProperties_v2): 1032 bytes.
PROP_SIZE, PROP_NAME, PROP_TOTAL_MEM, PROP_MAJOR, PROP_MINOR = 1032, 0, 288, 360, 364
PROP_PCI_BUS, PROP_PCI_DEVICE, PROP_PCI_DOMAIN = 584, 588, 592

GiB = 1 << 30

ffi = cffi.FFI()
ffi.cdef(CDEF)
rt = ffi.dlopen("libcudart.so.12")


class CudaError(RuntimeError):
    pass


def ck(rc: int, what: str) -> None:
    if rc != 0:
        raise CudaError(f"{what} -> {rc} ({ffi.string(rt.cudaGetErrorName(rc)).decode()})")


def loaded_libcuda() -> list[str]:
    """Paths of every libcuda.so* mapped into this process (must be ncclsim's)."""
    paths = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and os.path.basename(parts[5]).startswith("libcuda.so"):
                paths.add(os.path.realpath(parts[5]))
    return sorted(paths)


def attr(a: int, dev: int) -> int:
    v = ffi.new("int *")
    ck(rt.cudaDeviceGetAttribute(v, a, dev), f"cudaDeviceGetAttribute({a}, {dev})")
    return v[0]


def malloc(size: int) -> "ffi.CData":
    p = ffi.new("void **")
    ck(rt.cudaMalloc(p, size), f"cudaMalloc({size})")
    return p[0]


def stream(flags: int = STREAM_NON_BLOCKING) -> "ffi.CData":
    s = ffi.new("cudaStream_t *")
    ck(rt.cudaStreamCreateWithFlags(s, flags), "cudaStreamCreateWithFlags")
    return s[0]


def event() -> "ffi.CData":
    e = ffi.new("cudaEvent_t *")
    ck(rt.cudaEventCreate(e), "cudaEventCreate")
    return e[0]


def host_bytes(ptr, n: int) -> bytes:
    return bytes(ffi.buffer(ffi.cast("char *", ptr), n))


# Host functions: one cffi callback dispatching on an integer tag in userData.
_host_actions: dict[int, object] = {}


@ffi.callback("void(void *)")
def _host_fn(user_data):
    _host_actions[int(ffi.cast("uintptr_t", user_data))]()


def launch_host(s, action) -> None:
    tag = len(_host_actions) + 1
    _host_actions[tag] = action
    ck(rt.cudaLaunchHostFunc(s, _host_fn, ffi.cast("void *", tag)), "cudaLaunchHostFunc")


# ---- checks ----

def check_devices() -> dict:
    """Count and, per device, what the runtime reports about it."""
    n = ffi.new("int *")
    rc = rt.cudaGetDeviceCount(n)
    res: dict = {"rc": rc, "count": n[0], "libcuda": loaded_libcuda(), "devices": []}
    if rc != 0:
        return res
    v = ffi.new("int *")
    ck(rt.cudaDriverGetVersion(v), "cudaDriverGetVersion")
    res["driver_version"] = v[0]
    for d in range(n[0]):
        bus = ffi.new("char[32]")
        ck(rt.cudaDeviceGetPCIBusId(bus, 32, d), f"cudaDeviceGetPCIBusId({d})")
        back = ffi.new("int *")
        ck(rt.cudaDeviceGetByPCIBusId(back, bus), "cudaDeviceGetByPCIBusId")
        prop = ffi.new("char[]", 4096)  # generous: the runtime writes PROP_SIZE bytes
        ck(rt.cudaGetDeviceProperties_v2(prop, d), f"cudaGetDeviceProperties_v2({d})")
        i32 = ffi.cast("int *", prop)
        res["devices"].append({
            "bus_id": ffi.string(bus).decode(),
            "by_bus_id": back[0],
            "cc": [attr(ATTR_CC_MAJOR, d), attr(ATTR_CC_MINOR, d)],
            "pci": [attr(ATTR_PCI_DOMAIN, d), attr(ATTR_PCI_BUS, d), attr(ATTR_PCI_DEVICE, d)],
            "sm_count": attr(ATTR_SM_COUNT, d),
            "name": ffi.string(prop + PROP_NAME).decode(),
            "total_mem": ffi.cast("size_t *", prop + PROP_TOTAL_MEM)[0],
            "prop_cc": [i32[PROP_MAJOR // 4], i32[PROP_MINOR // 4]],
            "prop_pci": [i32[PROP_PCI_DOMAIN // 4], i32[PROP_PCI_BUS // 4], i32[PROP_PCI_DEVICE // 4]],
            "untouched_tail": bytes(ffi.buffer(prop + PROP_SIZE, 4096 - PROP_SIZE)).count(0),
        })
        ck(rt.cudaSetDevice(d), f"cudaSetDevice({d})")
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        ck(rt.cudaMemGetInfo(free, total), "cudaMemGetInfo")
        res["devices"][-1]["meminfo_total"] = total[0]
    return res


def check_copies() -> dict:
    """Real bytes through cudaMemcpy / cudaMemset / cudaMemcpyAsync."""
    rng = random.Random(1234)
    n = (1 << 20) + 123
    src = rng.randbytes(n)
    ck(rt.cudaSetDevice(2), "cudaSetDevice(2)")
    d1, d2, d3 = malloc(n), malloc(n), malloc(n)
    res = {}

    host = ffi.new("char[]", n)
    ck(rt.cudaMemcpy(d1, src, n, H2D), "cudaMemcpy H2D")
    ck(rt.cudaMemcpy(d2, d1, n, D2D), "cudaMemcpy D2D")
    ck(rt.cudaMemcpy(host, d2, n, D2H), "cudaMemcpy D2H")
    res["sync_round_trip"] = bytes(ffi.buffer(host)) == src
    # The device buffers are distinct memory: clearing d1 leaves d2 intact.
    ck(rt.cudaMemset(d1, 0, n), "cudaMemset(d1, 0)")
    ck(rt.cudaMemcpy(host, d2, n, DEFAULT), "cudaMemcpy Default(D2H)")
    res["default_kind_round_trip"] = bytes(ffi.buffer(host)) == src

    ck(rt.cudaMemset(d3, 0xAB, n), "cudaMemset(0xAB)")
    ck(rt.cudaMemset(ffi.cast("char *", d3) + 100, 0x5A, 50), "cudaMemset(+100, 0x5A, 50)")
    ck(rt.cudaMemcpy(host, d3, n, D2H), "cudaMemcpy D2H after memset")
    got = bytes(ffi.buffer(host))
    res["memset"] = got == b"\xab" * 100 + b"\x5a" * 50 + b"\xab" * (n - 150)

    s = stream()
    src2 = rng.randbytes(n)
    pinned = ffi.new("void **")
    ck(rt.cudaHostAlloc(pinned, n, 0), "cudaHostAlloc")
    ck(rt.cudaMemcpyAsync(d1, src2, n, H2D, s), "cudaMemcpyAsync H2D")
    ck(rt.cudaMemcpyAsync(d2, d1, n, D2D, s), "cudaMemcpyAsync D2D")
    ck(rt.cudaMemcpyAsync(pinned[0], d2, n, D2H, s), "cudaMemcpyAsync D2H")
    ck(rt.cudaStreamSynchronize(s), "cudaStreamSynchronize")
    res["async_round_trip"] = host_bytes(pinned[0], n) == src2
    res["stream_query_after_sync"] = rt.cudaStreamQuery(s)

    for p in (d1, d2, d3):
        ck(rt.cudaFree(p), "cudaFree")
    ck(rt.cudaFreeHost(pinned[0]), "cudaFreeHost")
    ck(rt.cudaStreamDestroy(s), "cudaStreamDestroy")
    return res


def check_event_timing() -> dict:
    """Elapsed time between two events around a host function sleeping 50 ms."""
    s = stream()
    start, end = event(), event()
    gate = threading.Event()  # holds the host function until the query below is done
    ck(rt.cudaEventRecord(start, s), "cudaEventRecord(start)")
    launch_host(s, lambda: (gate.wait(10), time.sleep(0.05)))
    ck(rt.cudaEventRecord(end, s), "cudaEventRecord(end)")
    query_before = rt.cudaEventQuery(end)  # 600 (not ready): the host function has not finished
    gate.set()
    t0 = time.monotonic()
    ck(rt.cudaEventSynchronize(end), "cudaEventSynchronize")
    waited = time.monotonic() - t0
    ms = ffi.new("float *")
    ck(rt.cudaEventElapsedTime(ms, start, end), "cudaEventElapsedTime")
    return {"elapsed_ms": ms[0], "query_before": query_before,
            "query_after": rt.cudaEventQuery(end), "sync_waited_s": waited}


def check_host_func_order() -> dict:
    """Three host functions on one stream run in order; the first one is slow."""
    s = stream()
    seen: list = []
    threads: list = []
    gate = threading.Event()  # holds the first one until the query below is done

    def step(i: int, delay: float, wait: bool = False):
        def run():
            if wait:
                gate.wait(10)
            time.sleep(delay)
            seen.append(i)
            threads.append(threading.get_ident())
        return run

    launch_host(s, step(1, 0.1, wait=True))
    launch_host(s, step(2, 0.0))
    launch_host(s, step(3, 0.0))
    pending = rt.cudaStreamQuery(s)  # 600: the first one is still held
    gate.set()
    ck(rt.cudaStreamSynchronize(s), "cudaStreamSynchronize")  # returns 0.1 s later at best
    at_sync = list(seen)
    return {"order": at_sync, "query_while_pending": pending,
            "ran_on_caller_thread": threading.get_ident() in threads}


def check_queue_depth() -> dict:
    """A thread submits 3000 host functions behind one that is held: it blocks
    once the stream's queue is full, and goes on when the stream drains."""
    s = stream()
    gate = threading.Event()
    ran = [0]
    launch_host(s, lambda: gate.wait(30))
    launch_host(s, lambda: ran.__setitem__(0, ran[0] + 1))
    tag = len(_host_actions)  # the counting action, submitted again and again below
    submitted = [1]
    total = 3000

    def submit() -> None:
        for _ in range(total - 1):
            ck(rt.cudaLaunchHostFunc(s, _host_fn, ffi.cast("void *", tag)), "cudaLaunchHostFunc")
            submitted[0] += 1

    t = threading.Thread(target=submit)
    t.start()
    time.sleep(1.0)  # ample for 3000 submissions that do not block
    while_held = submitted[0]
    gate.set()
    t.join(60)
    ck(rt.cudaStreamSynchronize(s), "cudaStreamSynchronize")
    return {"submitted_while_held": while_held, "submitted": submitted[0], "ran": ran[0],
            "total": total}


def polling(what: str) -> dict:
    """A thread asks again and again whether a stream (or an event recorded on
    it) is done while a host function holds the stream for 0.5 s: the answers,
    and the CPU time the asking took."""
    s = stream()
    gate = threading.Event()
    launch_host(s, lambda: gate.wait(0.5))
    e = event()
    ck(rt.cudaEventRecord(e, s), "cudaEventRecord")
    query = (lambda: rt.cudaStreamQuery(s)) if what == "stream" else (lambda: rt.cudaEventQuery(e))
    first = query()
    wall, cpu, answers = time.monotonic(), time.thread_time(), 0
    while (rc := query()) == NOT_READY:
        answers += 1
    cpu, wall = time.thread_time() - cpu, time.monotonic() - wall
    return {"first": first, "last": rc, "not_ready_answers": answers, "cpu_s": cpu, "wall_s": wall}


def check_polling_stream() -> dict:
    return polling("stream")


def check_polling_event() -> dict:
    return polling("event")


def check_wait_event() -> dict:
    """Stream B waits (cudaStreamWaitEvent) for an event recorded on stream A after
    a slow host function; B's host function must run after A's."""
    a, b = stream(), stream()
    ev = event()
    seen: list = []
    launch_host(a, lambda: (time.sleep(0.1), seen.append("A")))
    ck(rt.cudaEventRecord(ev, a), "cudaEventRecord")
    ck(rt.cudaStreamWaitEvent(b, ev, 0), "cudaStreamWaitEvent")
    launch_host(b, lambda: seen.append("B"))
    ck(rt.cudaStreamSynchronize(b), "cudaStreamSynchronize(b)")
    at_b_sync = list(seen)
    ck(rt.cudaStreamSynchronize(a), "cudaStreamSynchronize(a)")
    # Control: without the wait, the streams are independent: D's host function
    # runs while C's waits for it (C gives up after 10 s if D is held back).
    c, d = stream(), stream()
    ctrl: list = []
    gate = threading.Event()
    launch_host(c, lambda: (gate.wait(10), ctrl.append("C")))
    launch_host(d, lambda: (ctrl.append("D"), gate.set()))
    ck(rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
    return {"order_at_b_sync": at_b_sync, "control_order": ctrl}


def check_meminfo() -> dict:
    """cudaMemGetInfo around an untouched 1 GiB cudaMalloc, and the process RSS."""
    ck(rt.cudaSetDevice(1), "cudaSetDevice(1)")
    ck(rt.cudaFree(ffi.NULL), "cudaFree(NULL)")  # create the context first
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    ck(rt.cudaMemGetInfo(free, total), "cudaMemGetInfo")
    free0, total0 = free[0], total[0]
    rss0 = status_kib("VmRSS")
    p = malloc(GiB)
    rss1 = status_kib("VmRSS")
    ck(rt.cudaMemGetInfo(free, total), "cudaMemGetInfo")
    free1 = free[0]
    # Touch one page per MiB of the first 16 MiB: only those pages become resident.
    ck(rt.cudaMemset(p, 1, 16 << 20), "cudaMemset 16 MiB")
    rss2 = status_kib("VmRSS")
    ck(rt.cudaFree(p), "cudaFree")
    ck(rt.cudaMemGetInfo(free, total), "cudaMemGetInfo")
    free2 = free[0]
    # Other devices are unaffected.
    ck(rt.cudaSetDevice(0), "cudaSetDevice(0)")
    ck(rt.cudaMemGetInfo(free, total), "cudaMemGetInfo(dev 0)")
    return {"total": total0, "free0": free0, "free1": free1, "free2": free2,
            "dev0_free": free[0], "dev0_total": total[0],
            "rss_kib": [rss0, rss1, rss2]}


def check_host_alloc() -> dict:
    """cudaHostAlloc + cudaHostGetDevicePointer, and cudaPointerGetAttributes."""
    ck(rt.cudaSetDevice(3), "cudaSetDevice(3)")
    h = ffi.new("void **")
    ck(rt.cudaHostAlloc(h, 1 << 20, HOST_ALLOC_MAPPED), "cudaHostAlloc")
    dptr = ffi.new("void **")
    ck(rt.cudaHostGetDevicePointer(dptr, h[0], 0), "cudaHostGetDevicePointer")
    d = malloc(4096)
    a = ffi.new("struct cudaPointerAttributes *")
    ck(rt.cudaPointerGetAttributes(a, d), "cudaPointerGetAttributes(device)")
    dev_attrs = {"type": a.type, "device": a.device,
                 "devicePointer": int(ffi.cast("uintptr_t", a.devicePointer))}
    inner = ffi.cast("char *", d) + 100
    ck(rt.cudaPointerGetAttributes(a, inner), "cudaPointerGetAttributes(device+100)")
    inner_attrs = {"type": a.type, "device": a.device,
                   "devicePointer": int(ffi.cast("uintptr_t", a.devicePointer))}
    ck(rt.cudaPointerGetAttributes(a, h[0]), "cudaPointerGetAttributes(host)")
    host_attrs = {"type": a.type, "hostPointer": int(ffi.cast("uintptr_t", a.hostPointer)),
                  "devicePointer": int(ffi.cast("uintptr_t", a.devicePointer))}
    plain = ffi.new("char[64]")
    ck(rt.cudaPointerGetAttributes(a, plain), "cudaPointerGetAttributes(unregistered)")
    plain_attrs = {"type": a.type}
    res = {"host": int(ffi.cast("uintptr_t", h[0])), "host_dev": int(ffi.cast("uintptr_t", dptr[0])),
           "dev": int(ffi.cast("uintptr_t", d)), "dev_attrs": dev_attrs, "inner_attrs": inner_attrs,
           "host_attrs": host_attrs, "plain_attrs": plain_attrs}
    ck(rt.cudaFree(d), "cudaFree")
    ck(rt.cudaFreeHost(h[0]), "cudaFreeHost")
    return res


def check_peer_and_pool() -> dict:
    """Peer copies between devices, and stream-ordered allocation from the default pool."""
    rng = random.Random(99)
    n = 300_000
    src = rng.randbytes(n)
    can = ffi.new("int *")
    ck(rt.cudaDeviceCanAccessPeer(can, 0, 1), "cudaDeviceCanAccessPeer")
    ck(rt.cudaSetDevice(0), "cudaSetDevice(0)")
    ck(rt.cudaDeviceEnablePeerAccess(1, 0), "cudaDeviceEnablePeerAccess")
    a = malloc(n)
    ck(rt.cudaMemcpy(a, src, n, H2D), "cudaMemcpy H2D")
    ck(rt.cudaSetDevice(1), "cudaSetDevice(1)")
    b = malloc(n)
    ck(rt.cudaMemcpyPeer(b, 1, a, 0, n), "cudaMemcpyPeer")
    host = ffi.new("char[]", n)
    ck(rt.cudaMemcpy(host, b, n, D2H), "cudaMemcpy D2H")
    res = {"can_access_peer": can[0], "peer_round_trip": bytes(ffi.buffer(host)) == src}

    s = stream()
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    ck(rt.cudaMemGetInfo(free, total), "cudaMemGetInfo")
    free0 = free[0]
    p = ffi.new("void **")
    ck(rt.cudaMallocAsync(p, 64 << 20, s), "cudaMallocAsync")
    ck(rt.cudaMemsetAsync(p[0], 0x3C, 64 << 20, s), "cudaMemsetAsync")
    ck(rt.cudaMemcpyAsync(host, ffi.cast("char *", p[0]) + (64 << 20) - n, n, D2H, s),
       "cudaMemcpyAsync D2H")
    ck(rt.cudaStreamSynchronize(s), "cudaStreamSynchronize")
    res["pool_bytes"] = bytes(ffi.buffer(host)) == b"\x3c" * n
    attrs = ffi.new("struct cudaPointerAttributes *")
    ck(rt.cudaPointerGetAttributes(attrs, p[0]), "cudaPointerGetAttributes(pool)")
    res["pool_attrs"] = [attrs.type, attrs.device]
    ck(rt.cudaMemGetInfo(free, total), "cudaMemGetInfo")
    res["pool_charged"] = free0 - free[0]
    ck(rt.cudaFreeAsync(p[0], s), "cudaFreeAsync")
    ck(rt.cudaStreamSynchronize(s), "cudaStreamSynchronize")
    return res


def check_bad_input() -> dict:
    n = ffi.new("int *")
    ck(rt.cudaGetDeviceCount(n), "cudaGetDeviceCount")
    res = {"count": n[0]}
    res["set_device_count"] = rt.cudaSetDevice(n[0])
    rt.cudaGetLastError()
    res["set_device_negative"] = rt.cudaSetDevice(-1)
    rt.cudaGetLastError()
    ck(rt.cudaSetDevice(0), "cudaSetDevice(0)")
    p = ffi.new("void **")
    res["malloc_100gib"] = rt.cudaMalloc(p, 100 * GiB)
    rt.cudaGetLastError()
    # The failure left the device usable.
    q = ffi.new("void **")
    res["malloc_after"] = rt.cudaMalloc(q, 1 << 20)
    if res["malloc_after"] == 0:
        ck(rt.cudaFree(q[0]), "cudaFree")
    bus = ffi.new("char[32]")
    res["bus_id_count"] = rt.cudaDeviceGetPCIBusId(bus, 32, n[0])
    return res


def check_count() -> dict:
    """Only cudaGetDeviceCount: the malformed-platform scenario."""
    n = ffi.new("int *")
    n[0] = -7
    rc = rt.cudaGetDeviceCount(n)
    rc2 = rt.cudaGetDeviceCount(n)
    return {"rc": rc, "rc_again": rc2, "count": n[0]}


def check_modelled_time() -> dict:
    """Under a modelled clock (NCCLSIM_CLOCK=model, the host library preloaded):
    what events and the host clock say around copies and a sleep."""
    s = stream()
    size = 64 << 20
    dev, dev2, pinned = ffi.new("void **"), ffi.new("void **"), ffi.new("void **")
    ck(rt.cudaMalloc(dev, size), "cudaMalloc")
    ck(rt.cudaMalloc(dev2, size), "cudaMalloc")
    ck(rt.cudaHostAlloc(pinned, size, 0), "cudaHostAlloc")
    res = {}
    for name, dst, src, kind in (("h2d", dev[0], pinned[0], H2D), ("d2d", dev2[0], dev[0], D2D)):
        a, b = event(), event()
        ck(rt.cudaEventRecord(a, s), "cudaEventRecord")
        t0 = time.perf_counter()
        ck(rt.cudaMemcpyAsync(dst, src, size, kind, s), "cudaMemcpyAsync")
        ck(rt.cudaEventRecord(b, s), "cudaEventRecord")
        ck(rt.cudaStreamSynchronize(s), "cudaStreamSynchronize")
        host_s = time.perf_counter() - t0
        ms = ffi.new("float *")
        ck(rt.cudaEventElapsedTime(ms, a, b), "cudaEventElapsedTime")
        res[name] = {"event_ms": ms[0], "host_s": host_s}
    t0 = time.perf_counter()
    time.sleep(0.25)
    res["sleep_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    res["read_s"] = time.perf_counter() - t0
    gate = threading.Event()
    t0 = time.perf_counter()
    res["timed_wait"] = [gate.wait(0.5), time.perf_counter() - t0]
    return res


def check_modelled_queue() -> dict:
    """Under a modelled clock: a thread submits more copies than a stream's
    queue holds without synchronising; the host clock after each submission."""
    s = stream()
    size, total = 16 << 20, 1400
    dev, dev2 = ffi.new("void **"), ffi.new("void **")
    ck(rt.cudaMalloc(dev, size), "cudaMalloc")
    ck(rt.cudaMalloc(dev2, size), "cudaMalloc")
    t0 = time.perf_counter()
    after = []
    for _ in range(total):
        ck(rt.cudaMemcpyAsync(dev2[0], dev[0], size, D2D, s), "cudaMemcpyAsync")
        after.append(time.perf_counter() - t0)
    ck(rt.cudaStreamSynchronize(s), "cudaStreamSynchronize")
    return {"size": size, "after_s": after, "synced_s": time.perf_counter() - t0}


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}

if __name__ == "__main__":
    result = CHECKS[sys.argv[1]]()
    print("RESULT " + json.dumps(result), flush=True)
