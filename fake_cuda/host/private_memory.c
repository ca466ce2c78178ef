/* Part of libncclsim-host.so: which memory is private anonymous memory (what
 * malloc maps), whose pages can be dropped and then read as zeros, and which
 * bytes are all zero. For the zero fills (zero_fill.c), copies and receives
 * (zero_copy.c) and NCCL's shared allocations (shared_pages.c). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

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
