/* Part of libncclsim-host.so: which memory is private anonymous memory (what
 * malloc maps), whose pages can be dropped and then read as zeros. For the
 * zero fills (zero_fill.c) and NCCL's shared allocations (shared_pages.c). */
#include <stdbool.h>
#include <stddef.h>
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
