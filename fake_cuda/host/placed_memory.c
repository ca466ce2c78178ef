/* Part of libncclsim-host.so: NCCL's large allocations at the same address
 * in every process of a run.
 *
 * NCCL's proxy keeps, per rank, a pool of 2,048 operations of 33 KB each
 * (68 MB, ncclCalloc'd) and chains them at once: a pointer to the next in
 * each, one word per 8 pages, 8 MB of pages per rank that differ from rank to
 * rank only by where the allocator put the pool. Placed at the same address
 * in every process, the pools of different processes hold the same bytes and
 * can share their pages (shared_pages.c).
 *
 * An allocation of a given size takes the lowest free slot of that size's
 * lane: lanes of 128 GiB from 16 TiB up, far from what the kernel hands out
 * (top-down from the 128 TiB end, programs and heaps near 85 TiB), chosen by
 * a hash of the size, so that the processes of a run, making the same
 * allocations, put them in the same places. A lane taken by another size,
 * full, or an address already in use leave the allocation to the allocator
 * (not shared, the same bytes). free, realloc and malloc_usable_size know the
 * placed ones by their address (nccl_allocations.c). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#include "../common/hash_mix.h"
#include "interpose.h"

#define PLACED_BASE ((uintptr_t)16 << 40)
#define LANE_BYTES ((uintptr_t)128 << 30)
#define LANES 256 /* 32 TiB in all */
#define SLOTS 4096 /* NCCL's blocks of 404 KiB of its init: about a thousand per process */

struct lane {
    size_t bytes; /* the size whose lane it is; 0: none yet */
    uint64_t used[SLOTS / 64];
};

static struct lane lanes[LANES];
static pthread_mutex_t lanes_lock = PTHREAD_MUTEX_INITIALIZER;

/* A fork waits for a placement to end (the child has one thread: the lock
 * would never be released). */
static void before_fork(void) { pthread_mutex_lock(&lanes_lock); }
static void after_fork(void) { pthread_mutex_unlock(&lanes_lock); }
__attribute__((constructor)) static void lock_at_fork(void) { pthread_atfork(before_fork, after_fork, after_fork); }

bool host_placed(uintptr_t p) { return p - PLACED_BASE < (uintptr_t)LANES * LANE_BYTES; }

void *host_place(size_t bytes)
{
    if (!bytes || bytes % 4096 || bytes > LANE_BYTES) return NULL;
    unsigned l = (unsigned)(fc_hash_mix(FC_HASH_SEED, bytes) % LANES);
    struct lane *lane = &lanes[l];
    size_t slots = LANE_BYTES / bytes < SLOTS ? LANE_BYTES / bytes : SLOTS;
    void *placed = NULL;
    pthread_mutex_lock(&lanes_lock);
    if (!lane->bytes) __atomic_store_n(&lane->bytes, bytes, __ATOMIC_RELAXED); /* read without the lock */
    for (size_t k = 0; lane->bytes == bytes && k < slots && !placed; k++) {
        if (lane->used[k / 64] >> (k % 64) & 1) continue;
        char *want = (char *)(PLACED_BASE + l * LANE_BYTES + k * bytes);
        char *p = mmap(want, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == want) {
            __atomic_fetch_or(&lane->used[k / 64], (uint64_t)1 << (k % 64), __ATOMIC_RELAXED);
            placed = p;
        } else if (p != MAP_FAILED) {
            munmap(p, bytes); /* a kernel without MAP_FIXED_NOREPLACE (before 4.17) took it as a hint */
            break;
        } else if (errno != EEXIST) {
            break;
        }
    }
    pthread_mutex_unlock(&lanes_lock);
    return placed;
}

size_t host_placed_size(uintptr_t p)
{
    uintptr_t l = (p - PLACED_BASE) / LANE_BYTES, off = (p - PLACED_BASE) % LANE_BYTES;
    size_t bytes = __atomic_load_n(&lanes[l].bytes, __ATOMIC_RELAXED);
    if (!bytes || off % bytes || off / bytes >= SLOTS) return 0;
    size_t k = off / bytes;
    return __atomic_load_n(&lanes[l].used[k / 64], __ATOMIC_RELAXED) >> (k % 64) & 1 ? bytes : 0;
}

bool host_unplace(uintptr_t p)
{
    pthread_mutex_lock(&lanes_lock);
    size_t bytes = host_placed_size(p);
    if (bytes) {
        uintptr_t l = (p - PLACED_BASE) / LANE_BYTES, k = (p - PLACED_BASE) % LANE_BYTES / bytes;
        munmap((void *)p, bytes);
        __atomic_fetch_and(&lanes[l].used[k / 64], ~((uint64_t)1 << (k % 64)), __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&lanes_lock);
    return bytes != 0;
}
