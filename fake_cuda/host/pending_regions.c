/* Part of libncclsim-host.so: NCCL's large allocations waiting to be shared
 * (shared_pages.c), and when each is looked at.
 *
 * NCCL writes its allocations at different paces:
 *  - the peers of a channel right after allocating them (and zeroing another
 *    allocation): looked at the allocating thread's next calloc or memset
 *    that finds them written;
 *  - the pool of proxy operations, chained at once by the progress thread,
 *    which may allocate nothing more: looked at when that thread idles;
 *  - structures of its init, filled bit by bit and then read through the
 *    rest of it (minutes at 128 hosts): a sparse region is
 *    looked at again by its thread after STABLE_FIRST_MS, then twice as long
 *    each time, up to STABLE_MAX_MS, and shared once it has as many pages in
 *    memory as the time before, or when that thread ends (NCCL's init jobs
 *    in a group run in threads of their own); or, from any thread, at a
 *    kernel launch of NCCL's (init is over then) once noted for
 *    LAUNCH_AGE_NS;
 *  - blocks of its init (404 KiB, a few words in each 51,200-byte
 *    structure), shared once they stop growing, are looked at once more at
 *    a launch (their last bytes); structures written with zeros but for a
 *    few pages are shared at a launch only.
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

#define PENDING_MAX 4096 /* NCCL allocates a thousand blocks of 404 KiB per process during its init */
#define LAUNCH_AGE_NS 100000000ull /* younger ones may still be written (a pool being chained: ~1 ms) */
#define BATCH 32
#define STABLE_FIRST_MS 50
#define STABLE_MAX_MS 2000

struct pending {
    uintptr_t lo, hi;
    pid_t owner;
    uint64_t noted_ns;
    bool looking; /* a thread is sharing it now */
    bool at_launch; /* looked at again only at a launch (SHARE_AT_LAUNCH) */
    enum { FRESH, UNWRITTEN, SPARSE } seen;
    long resident;      /* pages in memory at the last look; -1: none yet */
    unsigned wait_ms;   /* until the owner's next look ... */
    uint64_t next_ns;   /* ... at this time (the first two looks: at once) */
};

static struct pending list[PENDING_MAX];
static unsigned count;
static _Atomic unsigned total; /* count, read without the lock */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread unsigned own_due; /* this thread's regions waiting (0: none; its calls look at nothing) */
static __thread bool looking;       /* the memsets of a look do not start another */

enum which { OWN_EARLY, OWN_ALL, ALL_OLD };
static const enum look_time time_of[] = {[OWN_EARLY] = LOOK_EARLY, [OWN_ALL] = LOOK_NOW, [ALL_OLD] = LOOK_AT_LAUNCH};

/* A fork waits for the list to be free; in the child, the threads looking at
 * regions are gone, and their regions wait again. */
static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&lock); }
static void after_fork_child(void)
{
    for (unsigned i = 0; i < count; i++) list[i].looking = false;
    pthread_mutex_unlock(&lock);
}
__attribute__((constructor)) static void lock_at_fork(void)
{
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static pid_t my_tid(void) { return (pid_t)syscall(SYS_gettid); }

/* The system calls themselves: real time, and a yield that never sleeps, not
 * this library's replacements of clock_gettime and sched_yield. */
static uint64_t now_ns(void)
{
    struct timespec t;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void remove_at(unsigned i)
{
    list[i] = list[--count];
    atomic_store(&total, count);
}

/* Which region goes first where the list is full: lowest first. */
static int eviction_rank(const struct pending *p) { return p->seen == UNWRITTEN ? 0 : p->seen == FRESH ? 1 : 2; }

static void look(enum which which);

/* A thread that noted regions looks at those left when it ends. */
static pthread_key_t at_exit;
static void thread_ends(void *unused)
{
    (void)unused;
    host_share_idle();
}
static void make_key(void) { pthread_key_create(&at_exit, thread_ends); }

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
        list[count++] = (struct pending){lo, hi, my_tid(), now_ns(), false, false, FRESH, -1, 0, 0};
        atomic_store(&total, count);
        own_due++;
    }
    pthread_mutex_unlock(&lock);
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    static __thread bool watched;
    if (!watched && pthread_once(&once, make_key) == 0 && pthread_setspecific(at_exit, &watched) == 0) watched = true;
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
        syscall(SYS_sched_yield);
    }
}

/* Looks at the regions `which` picks, BATCH at a time. */
static void look(enum which which)
{
    if (looking) return;
    looking = true;
    int saved = errno;
    pid_t me = my_tid();
    uint64_t now = now_ns(), old = now - LAUNCH_AGE_NS;
    for (;;) {
        struct pending picked[BATCH];
        unsigned n = 0, own = 0;
        pthread_mutex_lock(&lock);
        for (unsigned i = 0; i < count && n < BATCH; i++) {
            struct pending *p = &list[i];
            bool own_one = p->owner == me && !p->at_launch;
            own += own_one;
            bool want = !p->looking && (which == ALL_OLD ? p->noted_ns <= old
                                                          : own_one && (which == OWN_ALL || p->next_ns <= now));
            if (!want) continue;
            p->looking = true;
            picked[n++] = *p;
        }
        if (which == OWN_EARLY) own_due = own; /* those waiting for their time included */
        if (which == OWN_ALL && n == 0) own_due = 0; /* all its own gone (or another thread's look ends them) */
        pthread_mutex_unlock(&lock);
        if (n == 0) break;
        enum shared results[BATCH];
        for (unsigned k = 0; k < n; k++)
            results[k] = host_share_region(picked[k].lo, picked[k].hi, time_of[which],
                                           which == OWN_EARLY ? &picked[k].resident : NULL);
        pthread_mutex_lock(&lock);
        for (unsigned k = 0; k < n; k++) {
            unsigned i = 0;
            while (i < count && !(list[i].lo == picked[k].lo && list[i].looking)) i++;
            if (i == count) continue;
            struct pending p = list[i];
            remove_at(i);
            if (results[k] == SHARE_AT_LAUNCH) { /* left for a launch (any thread's) */
                p.looking = false;
                p.at_launch = true;
                list[count++] = p;
                atomic_store(&total, count);
                continue;
            }
            /* At a launch or an idle, a region still unwritten holds no memory: it goes. */
            if (results[k] == SHARE_DONE || which != OWN_EARLY) continue;
            /* looked at again at the owner's next calloc or memset (unwritten, or
             * sparse once its time has come), an idle or a launch; last in the
             * list, so that the next look begins with others */
            p.looking = false;
            p.resident = picked[k].resident;
            bool first = p.seen == FRESH;
            p.seen = results[k] == SHARE_LATER_SPARSE ? SPARSE : UNWRITTEN;
            if (!first || p.seen == SPARSE) { /* NCCL writes its peers right after the first look */
                p.wait_ms = p.wait_ms ? (p.wait_ms * 2 < STABLE_MAX_MS ? p.wait_ms * 2 : STABLE_MAX_MS) : STABLE_FIRST_MS;
                p.next_ns = now + p.wait_ms * 1000000ull;
            }
            list[count++] = p;
            atomic_store(&total, count);
        }
        pthread_mutex_unlock(&lock);
        if (which == OWN_EARLY) break; /* one pass: the unwritten stay for the next call */
    }
    errno = saved;
    looking = false;
}

bool host_share_due(void) { return own_due != 0; }
void host_share_pending(void) { look(OWN_EARLY); }
/* On every yield of a progress thread: nothing to do unless it noted regions. */
void host_share_idle(void)
{
    if (own_due) look(OWN_ALL);
}

EXPORT void ncclsim_shared_pages_settle(void)
{
    if (atomic_load(&total)) look(ALL_OLD);
}
