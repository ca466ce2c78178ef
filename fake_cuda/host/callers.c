/* Part of libncclsim-host.so: which library a call comes from, by its return
 * address. The clock (modelled_clock.c) answers NCCL's, the driver's and
 * MPI's reads with real time, and NCCL's and MPI's polling sleeps last
 * longer (idle_wait.c); both ask on hot paths (a clock read, a 1 us sleep in a
 * loop), and dladdr walks the loaded objects, so verdicts are cached by code
 * page. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "interpose.h"

static bool has_prefix(const char *base, const char *prefix) { return !strncmp(base, prefix, strlen(prefix)); }

static unsigned classify(const void *ret)
{
    Dl_info info, mine;
    if (!dladdr(ret, &info) || !info.dli_fname) return 0;
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    unsigned kind = has_prefix(base, "libnccl.so") ? HOST_CALLER_NCCL : 0;
    if (has_prefix(base, "libstdc++.so")) kind |= HOST_CALLER_CXX_RUNTIME;
    if (has_prefix(base, "libmpi") || has_prefix(base, "libpmpi")) kind |= HOST_CALLER_MPI;
    /* NCCL and its net plugins (libnccl-net-*.so), the simulated driver and
     * NVML, MPI, and this library's own code. */
    static const char *const real_time[] = {"libnccl", "libcuda.so", "libnvidia-ml.so", "libmpi", "libpmpi"};
    for (size_t i = 0; i < sizeof real_time / sizeof real_time[0]; i++)
        if (has_prefix(base, real_time[i])) kind |= HOST_CALLER_REAL_TIME;
    if (dladdr((void *)&classify, &mine) && mine.dli_fbase == info.dli_fbase) kind |= HOST_CALLER_REAL_TIME;
    return kind;
}

/* Verdicts by code page, page << 5 | 16 | kind in one word, so that a reader
 * never pairs one page with another's verdict; 0: none yet. */
#define PAGES 4096
static _Atomic uint64_t pages[PAGES];

unsigned host_caller(const void *ret)
{
    uint64_t page = (uintptr_t)ret >> 12, slot = (page * 0x9e3779b97f4a7c15ull) >> 52;
    uint64_t seen = atomic_load_explicit(&pages[slot], memory_order_relaxed);
    if (seen >> 5 == page && seen & 16) return (unsigned)(seen & 15);
    unsigned kind = classify(ret);
    atomic_store_explicit(&pages[slot], page << 5 | 16 | kind, memory_order_relaxed);
    return kind;
}

EXPORT bool ncclsim_caller_is_nccl(const void *ret) { return host_caller(ret) & HOST_CALLER_NCCL; }
