#!/usr/bin/env python3
"""Cost of hot calls into the simulated CUDA driver, in ns per call.

Compiles a small C harness with `cc` into a temporary directory, linked
directly against ncclsim's libcuda.so.1 (no CUDA header: the harness declares
the few prototypes and structures it uses), and times, on one thread with a
primary context current:

* calls NCCL and the CUDA runtime make all the time: cuDeviceGetAttribute,
  cuCtxGetCurrent, cuThreadExchangeStreamCaptureMode, cuPointerGetAttribute,
  cuStreamQuery (idle stream), cuEventRecord + cuEventQuery (idle stream),
  cuMemcpyHtoD of 8 bytes (synchronous) and cuMemcpyHtoDAsync of 8 bytes,
  cuLaunchKernel of a function from cuModuleLoadData + cuModuleGetFunction;
  and, for reference, one bare system call (the trace writes one per call);
* allocations (fewer iterations): cuMemAlloc + cuMemFree of 2 MiB, NCCL's VMM
  sequence for 2 MiB (cuMemCreate, cuMemAddressReserve, cuMemMap,
  cuMemSetAccess, cuMemUnmap, cuMemAddressFree, cuMemRelease), and the first
  write to each 4 KiB page of fresh simulated device memory (a page fault on
  a memfd mapping), per page, with the same on anonymous memory as reference;

each without tracing and with NCCLSIM_TRACE set to a temporary directory
(the trace's cost: one JSON line written per call). Each configuration runs
--runs times (default 3); the table gives the median of the calling thread's
CPU time per call (CLOCK_THREAD_CPUTIME_ID: insensitive to other load on a
shared machine) and of the wall time per call.

    python benchmarks/driver_call.py [--iterations 1000000] [--runs 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (loadavg, machine, median, ROOT, sim_env, snapshot_libs, table, temp_dir,  # noqa: E402
                    write_json)

HARNESS = r"""
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The few driver API types and prototypes used here (ABI of cuda.h, 64-bit). */
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct { int type; int id; } CUmemLocation;
typedef struct {
    int type;                 /* CUmemAllocationType */
    int requestedHandleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage;
             unsigned char reserved[4]; } allocFlags;
} CUmemAllocationProp;
typedef struct { CUmemLocation location; int flags; } CUmemAccessDesc;

CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *ctx);
CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev);
CUresult cuThreadExchangeStreamCaptureMode(int *mode);
CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr);
CUresult cuStreamCreate(CUstream *stream, unsigned int flags);
CUresult cuStreamQuery(CUstream stream);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuEventCreate(CUevent *event, unsigned int flags);
CUresult cuEventRecord(CUevent event, CUstream stream);
CUresult cuEventQuery(CUevent event);
CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size);
CUresult cuMemFree_v2(CUdeviceptr ptr);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream stream);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *f, CUmodule module, const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, CUstream stream, void **params, void **extra);
CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                  unsigned long long flags);
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemRelease(CUmemGenericAllocationHandle h);

#define ATTR_MULTIPROCESSOR_COUNT 16
#define POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define STREAM_NON_BLOCKING 1
#define EVENT_DISABLE_TIMING 2
#define CAPTURE_MODE_RELAXED 2
#define MIB2 (2u << 20)

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* CPU time of this thread: what a call costs, not counting time the thread
 * waited for a core (the machine is shared). */
static double cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

#define CHECK(call)                                                                   \
    do {                                                                              \
        CUresult r_ = (call);                                                         \
        if (r_ != 0) {                                                                \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, r_);      \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

/* Time `iters` repetitions of `body` after a warm-up of iters/10; print name, iterations,
 * CPU ns and wall ns each. */
#define BENCH(name, iters, body)                                                      \
    do {                                                                              \
        long n_ = (iters);                                                            \
        for (long i_ = 0; i_ < n_ / 10 + 1; i_++) { body; }                           \
        double c0_ = cpu_ns(), t0_ = now_ns();                                        \
        for (long i_ = 0; i_ < n_; i_++) { body; }                                    \
        double t_ = now_ns() - t0_, c_ = cpu_ns() - c0_;                              \
        printf("%s\t%ld\t%.1f\t%.1f\n", name, n_, c_ / (double)n_, t_ / (double)n_);  \
        fflush(stdout);                                                               \
    } while (0)

int main(int argc, char **argv)
{
    long hot = argc > 1 ? atol(argv[1]) : 1000000;
    long cold = argc > 2 ? atol(argv[2]) : 10000;
    CUdevice dev;
    CUcontext ctx, cur;
    CUstream stream;
    CUevent event;
    CUmodule module;
    CUfunction fn;
    CUdeviceptr dptr;
    static const char image[] = "not a real fatbin: the simulated driver does not parse images";
    char host[8] = {0};
    int value, mode = CAPTURE_MODE_RELAXED;
    unsigned memtype;

    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuStreamCreate(&stream, STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&event, EVENT_DISABLE_TIMING));
    CHECK(cuMemAlloc_v2(&dptr, MIB2));
    CHECK(cuModuleLoadData(&module, image));
    CHECK(cuModuleGetFunction(&fn, module, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"));

    BENCH("cuDeviceGetAttribute", hot, CHECK(cuDeviceGetAttribute(&value, ATTR_MULTIPROCESSOR_COUNT, dev)));
    BENCH("cuCtxGetCurrent", hot, CHECK(cuCtxGetCurrent(&cur)));
    BENCH("cuThreadExchangeStreamCaptureMode", hot, CHECK(cuThreadExchangeStreamCaptureMode(&mode)));
    BENCH("cuPointerGetAttribute(MEMORY_TYPE)", hot,
          CHECK(cuPointerGetAttribute(&memtype, POINTER_ATTRIBUTE_MEMORY_TYPE, dptr + 64)));
    BENCH("cuStreamQuery (idle stream)", hot, CHECK(cuStreamQuery(stream)));
    BENCH("cuEventRecord + cuEventQuery (idle stream)", hot,
          CHECK(cuEventRecord(event, stream)); CHECK(cuEventQuery(event)));
    BENCH("cuMemcpyHtoD 8 B (sync)", hot, CHECK(cuMemcpyHtoD_v2(dptr, host, 8)));
    BENCH("cuMemcpyHtoDAsync 8 B (idle stream)", hot, CHECK(cuMemcpyHtoDAsync_v2(dptr, host, 8, stream)));
    BENCH("cuLaunchKernel (idle stream)", hot,
          CHECK(cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, stream, NULL, NULL)));
    CHECK(cuStreamSynchronize(stream));
    BENCH("  (reference: one system call, getppid)", hot, syscall(SYS_getppid));

    CUdeviceptr p;
    BENCH("cuMemAlloc + cuMemFree 2 MiB", cold, CHECK(cuMemAlloc_v2(&p, MIB2)); CHECK(cuMemFree_v2(p)));

    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;                 /* CU_MEM_ALLOCATION_TYPE_PINNED */
    prop.requestedHandleTypes = 1; /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
    prop.location.type = 1;        /* CU_MEM_LOCATION_TYPE_DEVICE */
    prop.location.id = dev;
    CUmemAccessDesc access = {{1, 0}, 3}; /* device 0, PROT_READWRITE */
    access.location.id = dev;
    CUmemGenericAllocationHandle h;
    BENCH("VMM 2 MiB: create+reserve+map+access+unmap+free+release", cold,
          CHECK(cuMemCreate(&h, MIB2, &prop, 0)); CHECK(cuMemAddressReserve(&p, MIB2, 0, 0, 0));
          CHECK(cuMemMap(p, MIB2, 0, h, 0)); CHECK(cuMemSetAccess(p, MIB2, &access, 1));
          CHECK(cuMemUnmap(p, MIB2)); CHECK(cuMemAddressFree(p, MIB2)); CHECK(cuMemRelease(h)));

    /* First touch of fresh simulated device memory: one fault per 4 KiB page (memfd, shared). */
    long pages_done = 0;
    double fault_ns = 0, fault_cpu = 0;
    for (long k = 0; k < cold / 10 + 1; k++) {
        CHECK(cuMemAlloc_v2(&p, MIB2));
        volatile char *c = (volatile char *)(uintptr_t)p;
        double c0 = cpu_ns(), t0 = now_ns();
        for (size_t off = 0; off < MIB2; off += 4096) c[off] = 1;
        fault_ns += now_ns() - t0;
        fault_cpu += cpu_ns() - c0;
        pages_done += MIB2 / 4096;
        CHECK(cuMemFree_v2(p));
    }
    printf("%s\t%ld\t%.1f\t%.1f\n", "first write to a page of cuMemAlloc memory (fault)", pages_done,
           fault_cpu / (double)pages_done, fault_ns / (double)pages_done);

    /* For comparison: the same on private anonymous memory (4 KiB pages, no THP). */
    pages_done = 0;
    fault_ns = fault_cpu = 0;
    for (long k = 0; k < cold / 10 + 1; k++) {
        char *a = mmap(NULL, MIB2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (a == MAP_FAILED) exit(1);
        madvise(a, MIB2, MADV_NOHUGEPAGE);
        volatile char *c = a;
        double c0 = cpu_ns(), t0 = now_ns();
        for (size_t off = 0; off < MIB2; off += 4096) c[off] = 1;
        fault_ns += now_ns() - t0;
        fault_cpu += cpu_ns() - c0;
        pages_done += MIB2 / 4096;
        munmap(a, MIB2);
    }
    printf("%s\t%ld\t%.1f\t%.1f\n", "  (reference: first write to a page of anonymous mmap)", pages_done,
           fault_cpu / (double)pages_done, fault_ns / (double)pages_done);
    return 0;
}
"""


def build(tmp: Path, lib_dir: Path) -> Path:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        sys.exit("benchmarks: no C compiler (cc)")
    src = tmp / "harness.c"
    src.write_text(HARNESS)
    exe = tmp / "harness"
    cmd = [cc, "-O2", "-std=gnu11", "-Wall", "-o", str(exe), str(src), str(lib_dir / "libcuda.so.1"),
           f"-Wl,-rpath,{lib_dir}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"benchmarks: compiling the harness failed:\n{r.stderr}")
    return exe


def run_harness(exe: Path, env: dict[str, str], hot: int, cold: int) -> dict[str, tuple[float, float]]:
    """name -> (CPU ns per call, wall ns per call)."""
    r = subprocess.run([str(exe), str(hot), str(cold)], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"benchmarks: harness failed ({r.returncode}):\n{r.stderr[-2000:]}")
    out = {}
    for line in r.stdout.splitlines():
        name, _, cpu, wall = line.split("\t")
        out[name] = (float(cpu), float(wall))
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=1_000_000,
                    help="calls per hot-call row without tracing (default 10^6; allocation rows: /100, "
                         "traced: /10)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each configuration (median; default 3)")
    ap.add_argument("--no-snapshot", action="store_true",
                    help="link ncclsim/lib in place instead of a private copy taken at start")
    ap.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    args = ap.parse_args(argv)

    info = machine()
    hot, cold = args.iterations, max(args.iterations // 100, 100)
    results: dict[str, dict[str, list[tuple[float, float]]]] = {"plain": {}, "traced": {}}
    loads: list[float] = []
    trace_bytes: list[int] = []
    with temp_dir("call") as tmp:
        t = Path(tmp)
        lib = ROOT / "ncclsim" / "lib" if args.no_snapshot else snapshot_libs(t / "lib")
        exe = build(t, lib)
        env = sim_env(t / "cfg", gpus=8, lib_dir=lib)
        for i in range(args.runs):
            for mode in ("plain", "traced"):
                e = dict(env)
                trace_dir = t / f"trace-{i}"
                n_hot, n_cold = hot, cold
                if mode == "traced":
                    trace_dir.mkdir()
                    e["NCCLSIM_TRACE"] = str(trace_dir)
                    n_hot, n_cold = max(hot // 10, 1000), max(cold // 10, 100)
                loads.append(loadavg()[0])
                for name, ns in run_harness(exe, e, n_hot, n_cold).items():
                    results[mode].setdefault(name, []).append(ns)
                if mode == "traced":
                    files = list(trace_dir.iterdir())
                    calls = sum(1 for f in files for _ in f.open("rb"))
                    trace_bytes.append(sum(f.stat().st_size for f in files) // max(calls, 1))
                    shutil.rmtree(trace_dir)
                print(f"  run {i + 1}/{args.runs} {mode:<6} done (load {loads[-1]})", file=sys.stderr)

    def fmt(x: float) -> str:
        return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"

    rows, out = [], []
    for name, plain in results["plain"].items():
        traced = results["traced"].get(name, [(float("nan"), float("nan"))])
        p, pw = median(c for c, _ in plain), median(w for _, w in plain)
        tr, trw = median(c for c, _ in traced), median(w for _, w in traced)
        rows.append([name, fmt(p), fmt(pw), fmt(tr), fmt(trw), fmt(tr - p)])
        out.append({"call": name, "cpu_ns_per_call": round(p, 1), "wall_ns_per_call": round(pw, 1),
                    "cpu_ns_per_call_traced": round(tr, 1), "wall_ns_per_call_traced": round(trw, 1),
                    "runs_plain_cpu_wall": plain, "runs_traced_cpu_wall": traced})
    print(f"{info['date_utc']}  {info['cpus']} CPUs ({info['cpu_model']}), {info['memory_gib']} GiB, "
          f"commit {info['commit']}; median of {args.runs} runs; {hot:,} calls per hot row "
          f"({hot // 10:,} traced), {cold:,} per allocation row; load1 {median(loads):.1f}; "
          f"trace: {median(trace_bytes):.0f} bytes per record")
    print(table(["call", "CPU ns/call", "wall ns/call", "CPU ns/call, traced", "wall ns/call, traced",
                 "trace cost, CPU ns"], rows))
    write_json(args.json, {"benchmark": "driver_call", "machine": info, "iterations_hot": hot,
                           "iterations_alloc": cold, "loadavg_runs": loads, "loadavg_end": loadavg(),
                           "trace_bytes_per_record": trace_bytes, "results": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
