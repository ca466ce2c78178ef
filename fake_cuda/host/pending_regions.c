/* Part of libncclsim-host.so: NCCL's large allocations waiting to be shared
 * (shared_pages.c), and when each is looked at.
 *
 * NCCL writes its allocations at different paces:
 *  - the peers of a channel right after allocating them (and zeroing another
 *    allocation): shared at the allocating thread's next calloc or memset
 *    that finds them written, if then written in at least half their pages;
 *  - the pool of proxy operations, chained at once by the progress thread,
 *    which may allocate nothing more: shared when that thread idles;
 *  - the topology system, filled bit by bit through NCCL's init, possibly by
 *    a thread that ends with it: shared at a kernel launch of NCCL's (init is
 *    over then), from any thread, once noted for LAUNCH_AGE_NS.
 * The list is the process's; each region is looked at by one thread at a
 * time, and free() of a region being looked at waits for the look to end. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../common/host_lib.h"
#include "interpose.h"

#define PENDING_MAX 512
#define LAUNCH_AGE_NS 100000000ull /* younger ones may still be written (a pool being chained: ~1 ms) */
#define BATCH 32

struct pending {
    uintptr_t lo, hi;
    pid_t owner;
    uint64_t noted_ns;
    bool looking; /* a thread is sharing it now */
    enum { FRESH, UNWRITTEN, SPARSE } seen; /* SPARSE: it waits for an idle or a launch */
};

static struct pending list[PENDING_MAX];
static unsigned count;
static _Atomic unsigned total; /* count, read without the lock */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread unsigned own_dense; /* this thread's regions its next calloc or memset looks at */
static __thread bool looking;       /* the memsets of a look do not start another */

static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork(void) { pthread_mutex_unlock(&lock); }
__attribute__((constructor)) static void lock_at_fork(void) { pthread_atfork(before_fork, after_fork, after_fork); }

static pid_t my_tid(void) { return (pid_t)syscall(SYS_gettid); }

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* this library's own call: real time */
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void remove_at(unsigned i)
{
    list[i] = list[--count];
    atomic_store(&total, count);
}

/* Which region goes first where the list is full: lowest first. */
static int eviction_rank(const struct pending *p) { return p->seen == UNWRITTEN ? 0 : p->seen == FRESH ? 1 : 2; }

/* Where the list is full, a region not being looked at goes: the oldest found
 * unwritten (NCCL allocates hundreds it hardly uses), else the oldest not yet
 * looked at, else the oldest. */
void host_note_region(uintptr_t lo, uintptr_t hi)
{
    pthread_mutex_lock(&lock);
    if (count == PENDING_MAX) {
        unsigned pick = PENDING_MAX;
        for (unsigned i = 0; i < count; i++) {
            if (list[i].looking) continue;
            bool better = pick == PENDING_MAX || eviction_rank(&list[i]) < eviction_rank(&list[pick]) ||
                          (eviction_rank(&list[i]) == eviction_rank(&list[pick]) && list[i].noted_ns < list[pick].noted_ns);
            if (better) pick = i;
        }
        if (pick < PENDING_MAX) remove_at(pick);
    }
    if (count < PENDING_MAX) {
        list[count++] = (struct pending){lo, hi, my_tid(), now_ns(), false, FRESH};
        atomic_store(&total, count);
        own_dense++;
    }
    pthread_mutex_unlock(&lock);
}

void host_forget_region(uintptr_t lo)
{
    if (!atomic_load(&total)) return;
    for (;;) {
        pthread_mutex_lock(&lock);
        unsigned i = 0;
        while (i < count && list[i].lo != lo) i++;
        bool busy = i < count && list[i].looking;
        if (i < count && !busy) remove_at(i);
        pthread_mutex_unlock(&lock);
        if (!busy) return;
        host_yield();
    }
}

enum which { OWN_EARLY, OWN_ALL, ALL_OLD };

/* Looks at the regions `which` picks, BATCH at a time. */
static void look(enum which which)
{
    if (looking) return;
    looking = true;
    int saved = errno;
    pid_t me = my_tid();
    uint64_t old = which == ALL_OLD ? now_ns() - LAUNCH_AGE_NS : 0;
    for (;;) {
        struct pending picked[BATCH];
        unsigned n = 0;
        pthread_mutex_lock(&lock);
        for (unsigned i = 0; i < count && n < BATCH; i++) {
            struct pending *p = &list[i];
            bool want = !p->looking && (which == ALL_OLD ? p->noted_ns <= old
                                                          : p->owner == me && (which == OWN_ALL || p->seen != SPARSE));
            if (!want) continue;
            p->looking = true;
            picked[n++] = *p;
        }
        if (which != ALL_OLD && n == 0) own_dense = 0;
        pthread_mutex_unlock(&lock);
        if (n == 0) break;
        enum shared results[BATCH];
        for (unsigned k = 0; k < n; k++)
            results[k] = host_share_region(picked[k].lo, picked[k].hi, which == OWN_EARLY);
        pthread_mutex_lock(&lock);
        for (unsigned k = 0; k < n; k++) {
            unsigned i = 0;
            while (i < count && !(list[i].lo == picked[k].lo && list[i].looking)) i++;
            if (i == count) continue;
            struct pending p = list[i];
            remove_at(i);
            /* At a launch or an idle, a region still unwritten holds no memory: it goes. */
            if (results[k] == SHARE_DONE || which != OWN_EARLY) continue;
            /* looked at again at the owner's next calloc or memset (unwritten), or
             * at an idle or a launch (sparse); last in the list, so that the next
             * look begins with others */
            p.looking = false;
            p.seen = results[k] == SHARE_LATER_SPARSE ? SPARSE : UNWRITTEN;
            list[count++] = p;
            atomic_store(&total, count);
        }
        pthread_mutex_unlock(&lock);
        if (which == OWN_EARLY) break; /* one pass: the unwritten stay for the next call */
    }
    errno = saved;
    looking = false;
}

bool host_share_due(void) { return own_dense != 0; }
void host_share_pending(void) { look(OWN_EARLY); }
void host_share_idle(void)
{
    if (atomic_load(&total)) look(OWN_ALL);
}

EXPORT void ncclsim_shared_pages_settle(void)
{
    if (atomic_load(&total)) look(ALL_OLD);
}
