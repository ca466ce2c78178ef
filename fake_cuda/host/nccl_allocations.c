/* Part of libncclsim-host.so: the allocator's functions, for NCCL's large
 * allocations. calloc places a large one of NCCL's where the other processes
 * place theirs (placed_memory.c) and notes it to be shared (shared_pages.c,
 * pending_regions.c); free, realloc and malloc_usable_size know the placed
 * ones by their address, and free forgets a region still waiting. */
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interpose.h"

typedef void *calloc_fn(size_t, size_t);
typedef void *aligned_alloc_fn(size_t, size_t);
static calloc_fn *real_calloc;
static aligned_alloc_fn *real_aligned_alloc;
static __thread bool resolving;

/* What calloc returns while dlsym looks for libc's (dlsym may allocate). */
static _Alignas(16) char arena[16384];

static bool early_allocation(const void *p) { return (const char *)p >= arena && (const char *)p < arena + sizeof arena; }

static void *early_calloc(size_t bytes)
{
    static size_t used;
    if (bytes > sizeof arena) return NULL;
    size_t at = __atomic_fetch_add(&used, (bytes + 15) & ~(size_t)15, __ATOMIC_RELAXED);
    return at <= sizeof arena - bytes ? arena + at : NULL; /* static memory is zero */
}

__attribute__((constructor)) static void find_allocators(void)
{
    resolving = true;
    __atomic_store_n(&real_aligned_alloc, (aligned_alloc_fn *)dlsym(RTLD_NEXT, "aligned_alloc"), __ATOMIC_RELEASE);
    __atomic_store_n(&real_calloc, (calloc_fn *)dlsym(RTLD_NEXT, "calloc"), __ATOMIC_RELEASE);
    resolving = false;
}

/* NCCL's ncclCalloc (malloc and memset, which the compiler makes a calloc).
 * A large one is placed where the other processes place theirs
 * (placed_memory.c), or else starts on a page of its own, so that equal
 * structures are equal pages wherever the allocator would have put them
 * (free() takes it back as any aligned allocation). */
EXPORT void *calloc(size_t n, size_t size)
{
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes)) bytes = SIZE_MAX;
    calloc_fn *fn = __atomic_load_n(&real_calloc, __ATOMIC_ACQUIRE);
    if (!fn) {
        if (resolving) return early_calloc(bytes);
        find_allocators();
        fn = __atomic_load_n(&real_calloc, __ATOMIC_ACQUIRE);
        if (!fn) return early_calloc(bytes);
    }
    if (host_share_due()) host_share_pending();
    if (bytes == SIZE_MAX || !host_share_wanted(bytes) || !real_aligned_alloc ||
        !(host_caller(__builtin_return_address(0)) & HOST_CALLER_NCCL))
        return fn(n, size);
    size_t page_size = (size_t)sysconf(_SC_PAGESIZE);
    size_t whole = (bytes + page_size - 1) & ~(page_size - 1);
    char *p = host_place(whole);
    if (p) {
        host_note_region((uintptr_t)p, (uintptr_t)p + whole);
        return p;
    }
    p = real_aligned_alloc(page_size, whole);
    if (!p) return fn(n, size);
    /* zeroed as calloc zeroes fresh memory: without taking pages (the whole
     * allocation is ours, pages that held another one's data included) */
    if (!host_drop_private(p, whole)) {
        free(p);
        return fn(n, size);
    }
    host_note_region((uintptr_t)p, (uintptr_t)p + (bytes & ~(page_size - 1)));
    return p;
}

/* ---- free, realloc, malloc_usable_size: of placed allocations too ------- */

typedef void free_fn(void *);
static free_fn *real_free;

/* libc's free; calls while dlsym looks for it (dlsym may allocate and free
 * its own memory, from the early arena) leave that memory be. */
static free_fn *find_free(void)
{
    static __thread bool finding;
    free_fn *fn = __atomic_load_n(&real_free, __ATOMIC_ACQUIRE);
    if (fn || finding) return fn;
    finding = true;
    fn = (free_fn *)dlsym(RTLD_NEXT, "free");
    finding = false;
    __atomic_store_n(&real_free, fn, __ATOMIC_RELEASE);
    return fn;
}

EXPORT void free(void *p)
{
    /* NCCL's large allocations start on a page: only those may wait to be shared */
    if (((uintptr_t)p & 4095) == 0 && p) host_forget_region((uintptr_t)p);
    if (host_placed((uintptr_t)p) && host_unplace((uintptr_t)p)) return;
    if (early_allocation(p)) return;
    free_fn *fn = find_free();
    if (fn) fn(p);
}

EXPORT void *realloc(void *p, size_t n)
{
    if (((uintptr_t)p & 4095) == 0 && p) host_forget_region((uintptr_t)p);
    size_t bytes = host_placed((uintptr_t)p) ? host_placed_size((uintptr_t)p) : 0;
    if (!bytes) {
        REAL(realloc);
        return fn_(p, n);
    }
    void *q = n ? malloc(n) : NULL;
    if (n && !q) return NULL; /* p stays, as realloc leaves it */
    if (q) memcpy(q, p, n < bytes ? n : bytes);
    host_unplace((uintptr_t)p);
    return q;
}

EXPORT size_t malloc_usable_size(void *p)
{
    size_t bytes = host_placed((uintptr_t)p) ? host_placed_size((uintptr_t)p) : 0;
    if (bytes) return bytes;
    REAL(malloc_usable_size);
    return fn_(p);
}
