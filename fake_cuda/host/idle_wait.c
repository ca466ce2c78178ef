/* Part of libncclsim-host.so: idle NCCL proxy threads sleep (see idle.h).
 *
 * NCCL's progress thread loops over its operations and, when none moved,
 * calls sched_yield (std::this_thread::yield). On a machine running
 * many more ranks than it has cores, those yields are most of the CPU time
 * (a 2 x 8 run on 2 cores: ~40 % of all samples in sched_yield). Here a
 * progress thread that yielded IDLE_YIELDS times in a row without anything
 * happening sleeps until something it may be waiting for happens:
 *  - its rank's emulated GPU posts a step (ncclsim_nudge_proxies),
 *  - NCCL's host code signals a condition variable (pthread_cond_signal: it
 *    does when it posts new operations to the proxy),
 *  - a socket the net plugin waits on becomes ready (ncclsim_watch_fd),
 * or a timeout passes (SLEEP_NS; when a socket could not be watched,
 * SLEEP_MIN_NS doubling to SLEEP_MAX_NS while nothing happens), which bounds
 * what a missed event costs. Results and errno of the calls are unchanged:
 * what NCCL decides does not change. */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "futex_wake.h"
#include "host_lib.h"
#include "interpose.h"
#include "platform.h"

/* A progress loop pass is a few microseconds: this many empty passes in a
 * row mean the thread waits. Each yield on a machine shared by every rank is
 * a thread switch: with 16, NCCL's progress threads on 8 x 8 yielded ~56
 * times per 8-byte AllReduce for ~24 sleeps; what they wait for (their GPU's
 * step, a socket) wakes them from a sleep as well. */
#define IDLE_YIELDS 4
/* With every socket watched, the timeout only bounds a missed event: a
 * proxy often waits longer than a short one (on 8 x 8, for the broadcast
 * down a tree), and waking for nothing is a thread switch on a machine
 * shared by every rank. */
#define SLEEP_NS 2000000L
#define SLEEP_MIN_NS 50000L
#define SLEEP_MAX_NS 2000000L
#define MAX_WATCHED 256 /* per device; more than that: the short timeouts cover them */
#define MAX_FD 65536    /* watched sockets are numbered below this */
/* A thread's name is set by its creator after it starts: look again now and
 * then until it is known to be a progress thread. */
#define NAME_RECHECK 256

/* NCCL runs a progress thread per rank, and what wakes one (its GPU's step,
 * data on its sockets) concerns that rank only: with a process per host,
 * one wake for all would wake 8 threads for one's work, and each would
 * poll every socket of the process. So sleepers and what wakes them are
 * kept per device (the driver says which device a thread works for: NCCL's
 * progress thread sets its rank's, a stream's worker runs its GPU's work);
 * a thread whose device is not known sleeps in the last slot, which every
 * nudge wakes. */
#define ANY_DEVICE FC_MAX_GPUS
typedef struct {
    uint32_t events; /* counts nudges: a sleeper that saw it change does not sleep */
    int sleepers;
    bool made;       /* wake_fd: made at the first sleep */
    int wake_fd;     /* eventfd, written when something happened and a thread sleeps */
    int nwatched;
    bool overflowed; /* a socket could not be watched: sleep briefly */
    struct pollfd watched[MAX_WATCHED];
} proxy_slot;
static proxy_slot slots[FC_MAX_GPUS + 1];
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER; /* making wake_fd; watched */
static unsigned char fd_slot[MAX_FD]; /* a watched socket's slot + 1; 0: not watched */

static __thread int thread_device = -1;

/* The net plugin's announcements, per device as the proxies' slots: a
 * proxy thread's completed request concerns its own rank's GPU, and with a
 * process per host one counter for all woke every GPU's stream worker,
 * each of which then polled for a word only one of them waited for. */
static volatile uint32_t gpu_events[FC_MAX_GPUS + 1];
static int gpu_sleepers[FC_MAX_GPUS + 1]; /* threads in a sleep that gpu_events[i] wakes */

EXPORT void ncclsim_thread_device(int dev) { thread_device = dev >= 0 && dev < FC_MAX_GPUS ? dev : -1; }

static int my_slot(void) { return thread_device >= 0 ? thread_device : ANY_DEVICE; }

static void nudge_slot(proxy_slot *s)
{
    /* seq_cst here and in the sleeper: one of the two sees the other's change */
    __atomic_fetch_add(&s->events, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&s->sleepers, __ATOMIC_SEQ_CST) > 0 && __atomic_load_n(&s->made, __ATOMIC_ACQUIRE)) {
        uint64_t one = 1;
        int e = errno;
        if (write(s->wake_fd, &one, sizeof one) < 0) { /* a full counter still wakes */
        }
        errno = e;
    }
}

static void nudge_proxy(int i) { nudge_slot(&slots[i]); }

static void nudge_every(void (*nudge)(int slot))
{
    for (int i = 0; i <= ANY_DEVICE; i++) nudge(i);
}

/* A nudge concerns the calling thread's own device and the sleepers whose
 * device is not known; from a thread with no device, every device. */
static void nudge_for_caller(void (*nudge)(int slot))
{
    if (thread_device < 0) {
        nudge_every(nudge);
    } else {
        nudge(thread_device);
        nudge(ANY_DEVICE);
    }
}

EXPORT void ncclsim_nudge_proxies(void) { nudge_for_caller(nudge_proxy); }

static void nudge_gpu(int i)
{
    /* seq_cst here and in ncclsim_gpu_nudge_sleepers' callers: either this
     * sees the sleeper, or the sleeper reads the new count and does not sleep */
    __atomic_fetch_add(&gpu_events[i], 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&gpu_sleepers[i], __ATOMIC_SEQ_CST) == 0) return;
    int e = errno;
    fc_futex_wake(&gpu_events[i]);
    errno = e;
}

EXPORT void ncclsim_nudge_gpus(void) { nudge_for_caller(nudge_gpu); }

EXPORT volatile uint32_t *ncclsim_gpu_nudges(void) { return &gpu_events[my_slot()]; }

EXPORT void ncclsim_gpu_nudge_sleepers(int delta) { __atomic_fetch_add(&gpu_sleepers[my_slot()], delta, __ATOMIC_SEQ_CST); }

/* With watch_lock held: drop fd from slot i's watched sockets. */
static void unwatch(int i, int fd)
{
    proxy_slot *s = &slots[i];
    for (int k = 0; k < s->nwatched; k++)
        if (s->watched[k].fd == fd) {
            s->watched[k] = s->watched[--s->nwatched];
            break;
        }
    fd_slot[fd] = 0;
}

/* The calling thread's slot watches fd (0 events: nobody does). */
EXPORT void ncclsim_watch_fd(int fd, short events)
{
    int to = my_slot(), from = -1;
    if (fd >= MAX_FD && events) __atomic_store_n(&slots[to].overflowed, true, __ATOMIC_RELAXED);
    if (fd < 0 || fd >= MAX_FD) return;
    pthread_mutex_lock(&watch_lock);
    if (fd_slot[fd]) {
        from = fd_slot[fd] - 1;
        if (!events || from != to) unwatch(from, fd);
    }
    proxy_slot *s = &slots[to];
    if (events && fd_slot[fd]) {
        for (int k = 0; k < s->nwatched; k++)
            if (s->watched[k].fd == fd) s->watched[k].events = events;
    } else if (events && s->nwatched < MAX_WATCHED) {
        s->watched[s->nwatched++] = (struct pollfd){.fd = fd, .events = events};
        fd_slot[fd] = (unsigned char)(to + 1);
    } else if (events) {
        __atomic_store_n(&s->overflowed, true, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&watch_lock);
    /* a sleeper polls the new set */
    if (from >= 0 && from != to) nudge_slot(&slots[from]);
    if (events) nudge_slot(&slots[to]);
}

enum host_thread host_thread_kind(void)
{
    static __thread int known = -1; /* -1: not looked at yet */
    static __thread unsigned calls;
    if (known == HOST_THREAD_PROGRESS || (known >= 0 && ++calls % NAME_RECHECK)) return (enum host_thread)known;
    char name[17] = {0};
    prctl(PR_GET_NAME, name);
    known = strncmp(name, "NCCL Progress", 13) == 0 ? HOST_THREAD_PROGRESS
            : strncmp(name, "NCCL", 4) == 0     ? HOST_THREAD_NCCL
                                                : HOST_THREAD_OTHER;
    return (enum host_thread)known;
}

/* Sleep until a nudge of slot i, one of its watched sockets or `ns` pass. */
static void sleep_until_event(int i, uint32_t seen, long ns)
{
    proxy_slot *s = &slots[i];
    struct pollfd fds[MAX_WATCHED + 1];
    pthread_mutex_lock(&watch_lock);
    if (!s->made) {
        s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); /* -1: the thread only yields */
        __atomic_store_n(&s->made, true, __ATOMIC_RELEASE);
    }
    fds[0] = (struct pollfd){.fd = s->wake_fd, .events = POLLIN};
    memcpy(fds + 1, s->watched, (size_t)s->nwatched * sizeof fds[0]);
    int n = 1 + s->nwatched;
    pthread_mutex_unlock(&watch_lock);
    if (fds[0].fd < 0) return;
    __atomic_fetch_add(&s->sleepers, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&s->events, __ATOMIC_SEQ_CST) == seen) {
        struct timespec ts = {0, ns};
        ppoll(fds, (nfds_t)n, &ts, NULL);
    }
    __atomic_fetch_sub(&s->sleepers, 1, __ATOMIC_SEQ_CST);
    uint64_t drained;
    if (read(fds[0].fd, &drained, sizeof drained) < 0) { /* nothing to drain */
    }
}

/* The plain yield (wait_on_empty.c: a receive that found nothing, inside
 * the loop, before the plugin has updated what a sleep must watch). */
int host_yield(void)
{
    REAL(sched_yield);
    return fn_();
}

EXPORT int sched_yield(void)
{
    REAL(sched_yield);
    if (host_thread_kind() != HOST_THREAD_PROGRESS) return fn_();
    host_share_idle(); /* its pool of operations, chained by now (pending_regions.c) */
    static __thread uint32_t seen;
    static __thread unsigned idle;
    int slot = my_slot();
    uint32_t now = __atomic_load_n(&slots[slot].events, __ATOMIC_ACQUIRE);
    if (now != seen) {
        seen = now;
        idle = 0;
    }
    if (++idle < IDLE_YIELDS) return fn_();
    int e = errno;
    long ns = SLEEP_NS;
    if (__atomic_load_n(&slots[slot].overflowed, __ATOMIC_RELAXED)) {
        unsigned doublings = (idle - IDLE_YIELDS) < 6 ? idle - IDLE_YIELDS : 6;
        ns = SLEEP_MIN_NS << doublings;
        if (ns > SLEEP_MAX_NS) ns = SLEEP_MAX_NS;
    }
    sleep_until_event(slot, seen, ns);
    errno = e;
    return 0;
}

/* NCCL's group launch, when several communicators of a process initialise
 * or connect at once (a process driving all GPUs of its host), runs a thread
 * per communicator and polls them with sleeps of 1 us (group.cc: sleep_for,
 * usleep(1) before 2.28): each process then wakes ~20,000 times a second
 * for as long as initialisation takes, which on a machine running a hundred
 * such processes is more CPU than the initialisation itself. A sleep that
 * NCCL asks for below POLL_SLEEP_MIN_NS lasts that long instead, doubling
 * while the thread keeps polling, up to POLL_SLEEP_MAX_NS; a poll loop then
 * notices a finished thread that much later, once per group launch.
 * MPICH polls the same way while a rank waits in an MPI call (with
 * MPIR_CVAR_ENABLE_HEAVY_YIELD, which launch sets, its yield every
 * MPIR_CVAR_POLLS_BEFORE_YIELD polls is a 1 ns sleep): its sleeps are
 * lengthened alike, so that ranks waiting at a barrier leave the CPU to
 * those still working. */
#define POLL_SLEEP_MIN_NS 50000L
#define POLL_SLEEP_MAX_NS 5000000L
/* A thread sleeping again within this of its previous sleep's end is still
 * polling (a sleep ends up to the timer slack, 50 us, late). */
#define POLL_GAP_NS 1000000L

const struct timespec *host_sleep_length(const void *ret, const struct timespec *req, struct timespec *longer)
{
    static __thread long next_ns;      /* this thread's next polling sleep */
    static __thread struct timespec last; /* when its last one ended */
    if (!req || req->tv_sec != 0 || req->tv_nsec >= POLL_SLEEP_MIN_NS || req->tv_nsec < 0 ||
        !(host_caller(ret) & (HOST_CALLER_NCCL | HOST_CALLER_MPI)))
        return req;
    REAL(clock_gettime); /* real time: this library's own is the modelled clock's */
    struct timespec now;
    fn_(CLOCK_MONOTONIC, &now);
    long since = (now.tv_sec - last.tv_sec) * 1000000000L + (now.tv_nsec - last.tv_nsec);
    next_ns = since >= 0 && since < POLL_GAP_NS && next_ns ? next_ns * 2 : POLL_SLEEP_MIN_NS;
    if (next_ns > POLL_SLEEP_MAX_NS) next_ns = POLL_SLEEP_MAX_NS;
    *longer = (struct timespec){0, next_ns};
    last = (struct timespec){now.tv_sec + (now.tv_nsec + next_ns) / 1000000000L, (now.tv_nsec + next_ns) % 1000000000L};
    return longer;
}

/* NCCL posts operations to its proxy and then signals the proxy's condition
 * variable: with std::condition_variable::notify_one (libstdc++ calls
 * pthread_cond_signal) or with pthread_cond_signal itself. Only those
 * signals wake proxies: Python signals each time it hands over its
 * interpreter lock, and ncclsim's own libraries only broadcast. */
EXPORT int pthread_cond_signal(pthread_cond_t *c)
{
    REAL(pthread_cond_signal);
    int r = fn_(c);
    if (host_caller(__builtin_return_address(0)) & (HOST_CALLER_NCCL | HOST_CALLER_CXX_RUNTIME))
        nudge_every(nudge_proxy); /* the poster's current device need not be the proxy's */
    return r;
}
