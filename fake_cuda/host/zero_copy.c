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
 *  - memcpy of 1 MiB or more: a run of GIVE_BACK_MIN_PAGES or more whole
 *    pages whose source is all zeros is zeroed as zero_fill.c zeroes (pages
 *    out of memory given back, pages in memory written); the rest is copied.
 *  - recv into 64 KiB or more (wait_on_empty.c's recv calls host_recv):
 *    runs of GIVE_BACK_MIN_PAGES or more whole pages of what arrived, however
 *    little that was, that are all zeros and were out of memory before the
 *    call are given back. Pages that
 *    were in memory stay: their owner is using them, and given back each
 *    would fault in again at its next write (a buffer received into again
 *    and again). NCCL's own receives from stream sockets go through a
 *    scratch buffer, so that those pages are not faulted in at all.
 * The bytes are the same as the plain call's either way. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "interpose.h"
#include "thread_exit.h"
#include "zero_runs.h"

#define SPARSE_COPY_MIN ((size_t)1 << 20)
#define SPARSE_RECV_MIN ((size_t)64 << 10)
/* A run of zero pages shorter than this amid data is written like the data:
 * giving it back costs five system calls, a page fault is cheaper. */
#define GIVE_BACK_MIN_PAGES 4

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
        bool zero = host_all_zero(src + i * page, page);
        size_t j = i + 1;
        while (j < pages && host_all_zero(src + j * page, page) == zero) j++;
        if (zero && j - i >= GIVE_BACK_MIN_PAGES)
            fc_zero_runs(dst + i * page, j - i, page, host_write_zeros, host_give_back_readable, &n);
        else
            copy(dst + i * page, src + i * page, (j - i) * page);
        i = j;
    }
    copy(d, s, first - start);
    copy((char *)last, src + (last - first), end - last);
    errno = saved; /* memcpy sets no errno */
    return d;
}

/* Which pages of a receive of `len` bytes into `buf` (up to HOST_RECV_PAGES
 * whole pages from the first) were out of memory before it. */
struct recv_pages {
    uintptr_t first;
    size_t span;
    unsigned char before[HOST_RECV_PAGES];
};

static void pages_before(struct recv_pages *p, const void *buf, size_t len, size_t page)
{
    p->first = ((uintptr_t)buf + page - 1) & ~(uintptr_t)(page - 1);
    p->span = (uintptr_t)buf + len > p->first ? ((uintptr_t)buf + len - p->first) / page : 0;
    if (p->span > HOST_RECV_PAGES) p->span = HOST_RECV_PAGES;
    if (p->span && mincore((void *)p->first, p->span * page, p->before) != 0) p->span = 0;
}

static bool any_out(const struct recv_pages *p)
{
    for (size_t i = 0; i < p->span; i++)
        if (!(p->before[i] & 1)) return true;
    return false;
}

/* Page i of a receive: out of memory before it, and `data` (its bytes) are
 * all zeros. */
static bool droppable(const struct recv_pages *p, size_t i, const char *data, size_t page)
{
    return !(p->before[i] & 1) && host_all_zero(data, page);
}

/* After `got` bytes for `buf` arrived at `data` (`buf` itself, or a
 * scratch buffer): runs of GIVE_BACK_MIN_PAGES or more whole pages that were
 * out of memory before and received only zeros are given back; what arrived
 * elsewhere is copied to `buf`, except those runs. */
static void settle(const struct recv_pages *p, char *buf, const char *data, size_t got, size_t page)
{
    bool moved = data != buf;
    size_t head = p->first - (uintptr_t)buf;
    if (head > got) head = got;
    if (moved) copy(buf, data, head);
    size_t whole = (got - head) / page, any = SIZE_MAX;
    if (whole > p->span) whole = p->span;
    for (size_t i = 0; i < whole;) {
        const char *from = data + head + i * page;
        bool drop = droppable(p, i, from, page);
        size_t j = i + 1;
        while (j < whole && droppable(p, j, data + head + j * page, page) == drop) j++;
        char *at = buf + head + i * page;
        bool given = drop && j - i >= GIVE_BACK_MIN_PAGES && host_give_back_readable(at, (j - i) * page, &any);
        if (!given && moved) copy(at, from, (j - i) * page);
        i = j;
    }
    size_t done = head + whole * page;
    if (moved) copy(buf + done, data + done, got - done);
}

/* A thread's scratch for receives into memory not in use, kept while the
 * thread lives (it receives again: NCCL's ring of topology gathers). */
#define SCRATCH_BYTES ((size_t)256 << 10)
static __thread char *scratch;
static __thread bool scratch_failed;

static void scratch_free(void *p)
{
    munmap(p, SCRATCH_BYTES);
    scratch = NULL;
}
static fc_thread_exit scratch_exit = FC_THREAD_EXIT_INIT(scratch_free);

static char *own_scratch(void)
{
    if (scratch || scratch_failed) return scratch;
    scratch_failed = true;
    void *p = mmap(NULL, SCRATCH_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (!fc_thread_exit_arm(&scratch_exit, p)) {
        scratch_free(p);
        return NULL;
    }
    scratch_failed = false;
    return scratch = p;
}

bool host_stream_socket(int fd)
{
    int type;
    socklen_t len = sizeof type;
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
}

/* A receive into pages out of memory: NCCL's own from a stream socket goes
 * through the thread's scratch, so that no page of `buf` is faulted in only
 * to be given back again (a fault per page was most of what NCCL's gather of
 * 3.4 MB topology structures cost); at most SCRATCH_BYTES arrive per call
 * then, which a stream socket's receive may always return. */
ssize_t host_recv(recv_fn *real, int fd, void *buf, size_t n, int flags, const void *caller)
{
    if (n < SPARSE_RECV_MIN) return real(fd, buf, n, flags); /* most calls: NCCL's polls of a few bytes */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    struct recv_pages p;
    pages_before(&p, buf, n, page);
    if (!p.span || !any_out(&p)) return real(fd, buf, n, flags);
    bool through = host_caller(caller) & HOST_CALLER_NCCL && !(flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL)) &&
                   host_stream_socket(fd);
    char *tmp = through ? own_scratch() : NULL;
    size_t want = tmp && n > SCRATCH_BYTES ? SCRATCH_BYTES : n;
    ssize_t r = real(fd, tmp ? tmp : buf, want, flags);
    if (r > 0) { /* a large receive may arrive in small parts */
        int saved = errno;
        settle(&p, buf, tmp ? tmp : buf, (size_t)r < want ? (size_t)r : want, page); /* MSG_TRUNC: more */
        errno = saved;
    }
    return r;
}
