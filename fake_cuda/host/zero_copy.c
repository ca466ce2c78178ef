/* Part of libncclsim-host.so. Copies and receives of zeros that hold no
 * memory where none was in use: the zero fills of zero_fill.c, for data that
 * arrives by memcpy or recv.
 *
 * NCCL gathers the topology of every rank of a host into one buffer per
 * rank: each copies its own fixed-size topology structure (3.4 MB, mostly
 * unused zeros) into the buffer and receives the others' over its bootstrap
 * sockets. With 8 ranks a host that is 27 MB per rank for a moment, and on
 * 128 x 8 simulated GPUs the ranks reach it together: 28 GB, more than the
 * machine.
 *  - memcpy of 1 MiB or more: a run of whole pages whose source is all zeros
 *    is zeroed as zero_fill.c zeroes (pages out of memory given back, pages
 *    in memory written); the rest is copied.
 *  - recv into 64 KiB or more (wait_on_empty.c's recv calls the two
 *    functions here around libc's): whole pages of what arrived, however
 *    little that was, that are all zeros and were out of memory before the
 *    call are given back. Pages that were in memory stay: their owner is
 *    using them, and given back each would fault in again at its next write
 *    (a buffer received into again and again).
 * The bytes are the same as the plain call's either way. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "interpose.h"
#include "zero_runs.h"

#define SPARSE_COPY_MIN ((size_t)1 << 20)
#define SPARSE_RECV_MIN ((size_t)64 << 10)

typedef void *memcpy_fn(void *restrict, const void *restrict, size_t);
static memcpy_fn *real_memcpy;

/* Before libc's memcpy is known (only while this library starts). */
__attribute__((optimize("no-tree-loop-distribute-patterns")))
static void *bytewise(void *restrict d, const void *restrict s, size_t n)
{
    volatile unsigned char *to = d;
    const unsigned char *from = s;
    for (size_t i = 0; i < n; i++) to[i] = from[i];
    return d;
}

__attribute__((constructor)) static void find_memcpy(void)
{
    memcpy_fn *fn = (memcpy_fn *)dlsym(RTLD_NEXT, "memcpy");
    __atomic_store_n(&real_memcpy, fn, __ATOMIC_RELEASE);
}

static void *copy(void *restrict d, const void *restrict s, size_t n)
{
    memcpy_fn *fn = __atomic_load_n(&real_memcpy, __ATOMIC_ACQUIRE);
    return fn ? fn(d, s, n) : bytewise(d, s, n);
}

typedef uint64_t __attribute__((may_alias, aligned(1))) unaligned_word;

/* Whether the `n` bytes at `p` (a multiple of 64) are all zero; most pages
 * of data answer within their first line. */
__attribute__((optimize("no-tree-loop-distribute-patterns")))
static bool all_zero(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i += 64) {
        const unaligned_word *w = (const unaligned_word *)(p + i);
        if (w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) return false;
    }
    return true;
}

EXPORT void *memcpy(void *restrict d, const void *restrict s, size_t n)
{
    if (n < SPARSE_COPY_MIN) return copy(d, s, n);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)d, end = start + n;
    uintptr_t first = (start + page - 1) & ~(uintptr_t)(page - 1), last = end & ~(uintptr_t)(page - 1);
    if (last <= first) return copy(d, s, n);
    int saved = errno;
    const char *src = (const char *)s + (first - start);
    char *dst = (char *)first;
    size_t pages = (last - first) / page;
    for (size_t i = 0; i < pages;) {
        bool zero = all_zero(src + i * page, page);
        size_t j = i + 1;
        while (j < pages && all_zero(src + j * page, page) == zero) j++;
        if (zero)
            fc_zero_runs(dst + i * page, j - i, page, host_write_zeros, host_give_back, &n);
        else
            copy(dst + i * page, src + i * page, (j - i) * page);
        i = j;
    }
    copy(d, s, first - start);
    copy((char *)last, src + (last - first), end - last);
    errno = saved; /* memcpy sets no errno */
    return d;
}

void host_recv_pages_before(struct host_recv_pages *p, const void *buf, size_t len)
{
    p->span = 0;
    if (len < SPARSE_RECV_MIN) return; /* most calls: NCCL's polls of a few bytes */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    p->first = ((uintptr_t)buf + page - 1) & ~(uintptr_t)(page - 1);
    p->span = ((uintptr_t)buf + len - p->first) / page;
    if (p->span > HOST_RECV_PAGES) p->span = HOST_RECV_PAGES;
    if (p->span && mincore((void *)p->first, p->span * page, p->before) != 0) p->span = 0;
}

/* Page i of a receive: out of memory before it, and it received only zeros. */
static bool droppable(const struct host_recv_pages *p, size_t i, size_t page)
{
    return !(p->before[i] & 1) && all_zero((const char *)p->first + i * page, page);
}

void host_recv_pages_after(const struct host_recv_pages *p, const void *buf, size_t len, ssize_t got)
{
    if (got <= 0 || !p->span) return; /* a large receive may arrive in small parts */
    int saved = errno;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t received = (size_t)got < len ? (size_t)got : len; /* MSG_TRUNC returns more than fits */
    size_t whole = ((uintptr_t)buf + received - p->first) / page, any = SIZE_MAX;
    if (whole > p->span) whole = p->span;
    for (size_t i = 0; i < whole;) {
        bool drop = droppable(p, i, page);
        size_t j = i + 1;
        while (j < whole && droppable(p, j, page) == drop) j++;
        if (drop) host_give_back((char *)p->first + i * page, (j - i) * page, &any);
        i = j;
    }
    errno = saved;
}
