/* Part of libncclsim-host.so. NCCL zeroes every shared-memory segment it
 * creates (memset over the whole mapping), among them a 68 MB pool of proxy
 * operations per rank of which it then uses about an eighth, and every large
 * host structure it allocates (ncclCalloc: malloc, then memset), among them
 * a topology system of ~58 MB per rank: on a simulated cluster of hundreds of
 * ranks on one machine, much of its memory.
 * Here a large zero fill does not write the pages it finds out of memory
 * (mincore: never written, or swapped out), it gives them back:
 *  - of a shared file mapping (tmpfs: /dev/shm) it punches a hole
 *    (MADV_REMOVE);
 *  - of private anonymous memory (malloc's mmap) it drops them
 *    (MADV_DONTNEED), after which they read as zero (private_memory.c).
 * Either way the pages read as zero, as after the memset, but hold no memory
 * until written. Pages in memory are written (zero_runs.h says why). Any
 * other memory (a private file mapping, locked memory) gets the real memset;
 * the result is the same bytes either way. */
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "interpose.h"
#include "zero_runs.h"

/* Below these a memset is cheaper than the system calls. Shared memory
 * includes the host buffers NCCL zeroes per network connection (a 512 KiB LL
 * buffer and its flags: ncclCudaHostCalloc), of which a run uses a few
 * pages; a failed MADV_REMOVE (private memory) costs one system call. */
#define PUNCH_SHARED_MIN ((size_t)256 << 10)
#define PUNCH_PRIVATE_MIN ((size_t)1 << 20)

typedef void *memset_fn(void *, int, size_t);
static memset_fn *real_memset;

/* Before libc's memset is known (only while this library starts). The
 * attribute keeps the compiler from turning the loop into a memset call. */
__attribute__((optimize("no-tree-loop-distribute-patterns")))
static void *bytewise(void *p, int c, size_t n)
{
    volatile unsigned char *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)c;
    return p;
}

__attribute__((constructor)) static void find_memset(void)
{
    memset_fn *fn = (memset_fn *)dlsym(RTLD_NEXT, "memset");
    __atomic_store_n(&real_memset, fn, __ATOMIC_RELEASE);
}

static void *fill(void *p, int c, size_t n)
{
    memset_fn *fn = __atomic_load_n(&real_memset, __ATOMIC_ACQUIRE);
    return fn ? fn(p, c, n) : bytewise(p, c, n);
}

bool host_write_zeros(char *run, size_t bytes, void *ctx)
{
    (void)ctx;
    fill(run, 0, bytes);
    return true;
}

/* `whole`: the size of the fill or copy; `readable`: map the private pages
 * given back to the zero page (not shared ones: a read there would allocate). */
static bool release_pages(char *run, size_t bytes, size_t whole, bool readable)
{
    if (madvise(run, bytes, MADV_REMOVE) == 0) return true;
    if (whole < PUNCH_PRIVATE_MIN || !host_drop_private(run, bytes)) return false;
    if (readable) madvise(run, bytes, MADV_POPULATE_READ); /* where it fails, each page faults in at its first read */
    return true;
}

bool host_give_back(char *run, size_t bytes, void *ctx) { return release_pages(run, bytes, *(const size_t *)ctx, false); }

bool host_give_back_readable(char *run, size_t bytes, void *ctx)
{
    return release_pages(run, bytes, *(const size_t *)ctx, true);
}

EXPORT void *memset(void *p, int c, size_t n)
{
    if (host_share_due()) host_share_pending(); /* what NCCL allocated before may be written by now */
    if (c != 0 || n < PUNCH_SHARED_MIN) return fill(p, c, n);
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)p, end = start + n;
    uintptr_t first = (start + page - 1) & ~(page - 1), last = end & ~(page - 1);
    if (last <= first) return fill(p, c, n);
    int saved = errno;
    fc_zero_runs((char *)first, (last - first) / page, page, host_write_zeros, host_give_back, &n);
    errno = saved; /* memset sets no errno */
    fill(p, 0, first - start);
    fill((void *)last, 0, end - last);
    return p;
}
