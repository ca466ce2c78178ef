/* Part of libncclsim-host.so: which memory is private anonymous memory (what
 * malloc maps), whose pages can be dropped and then read as zeros, and which
 * bytes are all zero, which pages hold data. For the zero fills (zero_fill.c), copies and receives
 * (zero_copy.c) and NCCL's shared allocations (shared_pages.c). */
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "interpose.h"

/* MADV_WIPEONFORK, which only private anonymous memory accepts, tells which
 * memory that is; it is undone at once (a fork in between gives the child
 * zeros where the parent is writing zeros). */
bool host_private_anonymous(void *p, size_t n)
{
    bool anonymous = madvise(p, n, MADV_WIPEONFORK) == 0;
    madvise(p, n, MADV_KEEPONFORK); /* also where a range of several mappings failed part-way */
    return anonymous;
}

bool host_drop_private(void *p, size_t n) { return host_private_anonymous(p, n) && madvise(p, n, MADV_DONTNEED) == 0; }

typedef uint64_t __attribute__((may_alias, aligned(1))) unaligned_word;

/* Most pages of data answer within their first line. */
__attribute__((optimize("no-tree-loop-distribute-patterns")))
bool host_all_zero(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i += 64) {
        const unaligned_word *w = (const unaligned_word *)(p + i);
        if (w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) return false;
    }
    return true;
}

/* Bits of a /proc/<pid>/pagemap entry (the kernel's admin-guide/mm/pagemap). */
#define PAGEMAP_PRESENT ((uint64_t)1 << 63)
#define PAGEMAP_SWAPPED ((uint64_t)1 << 62)

void host_pages_held(const char *lo, size_t n, bool *held)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    uint64_t e[512];
    for (size_t first = 0; first < n; first += 512) {
        size_t k = n - first < 512 ? n - first : 512;
        off_t at = (off_t)((uintptr_t)lo / page + first) * (off_t)sizeof e[0];
        bool read_ok = fd >= 0 && pread(fd, e, k * sizeof e[0], at) == (ssize_t)(k * sizeof e[0]);
        for (size_t i = 0; i < k; i++) held[first + i] = !read_ok || (e[i] & (PAGEMAP_PRESENT | PAGEMAP_SWAPPED));
    }
    if (fd >= 0) syscall(SYS_close, fd); /* not through local_sockets.c's close */
}
