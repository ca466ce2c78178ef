/* Part of libncclsim-host.so: idle NCCL proxy threads sleep (see idle.h).
 *
 * NCCL's progress thread loops over its operations and, when none moved,
 * calls sched_yield (std::this_thread::yield). On a machine running
 * many more ranks than it has cores, those yields are most of the CPU time
 * (a 2 x 8 run on 2 cores: ~40 % of all samples in sched_yield). Here a
 * progress thread that yielded IDLE_YIELDS times in a row without anything
 * happening sleeps until something it may be waiting for happens:
 *  - an emulated GPU of this process posts a step (ncclsim_nudge_proxies),
 *  - NCCL's host code signals a condition variable (pthread_cond_signal: it
 *    does when it posts new operations to the proxy),
 *  - a socket the net plugin waits on becomes ready (ncclsim_watch_fd),
 * or a timeout passes (SLEEP_MIN_NS doubling to SLEEP_MAX_NS while nothing
 * happens), which bounds what a missed event costs. Results and errno of
 * the calls are unchanged: what NCCL decides does not change. */
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

#include "idle.h"
#include "interpose.h"

/* A progress loop pass is a few microseconds: this many empty passes in a
 * row mean the thread waits. */
#define IDLE_YIELDS 16
#define SLEEP_MIN_NS 50000L
#define SLEEP_MAX_NS 2000000L
#define MAX_WATCHED 256
/* A thread's name is set by its creator after it starts: look again now and
 * then until it is known to be a progress thread. */
#define NAME_RECHECK 256

static int proxy_sleepers;
static int wake_fd = -1; /* eventfd: written when proxies sleep and something happened */
static uint32_t proxy_events; /* counts nudges: a sleeper that saw it change does not sleep */
static volatile uint32_t gpu_events;
static int gpu_sleepers; /* threads in a sleep that gpu_events wakes */

static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pollfd watched[MAX_WATCHED];
static int nwatched;

static void make_wake_fd(void) { __atomic_store_n(&wake_fd, eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), __ATOMIC_RELEASE); }

EXPORT void ncclsim_nudge_proxies(void)
{
    /* seq_cst here and in the sleeper: one of the two sees the other's change */
    __atomic_fetch_add(&proxy_events, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&proxy_sleepers, __ATOMIC_SEQ_CST) > 0 && __atomic_load_n(&wake_fd, __ATOMIC_ACQUIRE) >= 0) {
        uint64_t one = 1;
        int e = errno;
        if (write(wake_fd, &one, sizeof one) < 0) { /* a full counter still wakes */
        }
        errno = e;
    }
}

EXPORT void ncclsim_nudge_gpus(void)
{
    /* seq_cst here and in ncclsim_gpu_nudge_sleepers' callers: either this
     * sees the sleeper, or the sleeper reads the new count and does not sleep */
    __atomic_fetch_add(&gpu_events, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&gpu_sleepers, __ATOMIC_SEQ_CST) == 0) return;
    int e = errno;
    fc_futex_wake(&gpu_events);
    errno = e;
}

EXPORT volatile uint32_t *ncclsim_gpu_nudges(void) { return &gpu_events; }

EXPORT void ncclsim_gpu_nudge_sleepers(int delta) { __atomic_fetch_add(&gpu_sleepers, delta, __ATOMIC_SEQ_CST); }

EXPORT void ncclsim_watch_fd(int fd, short events)
{
    pthread_mutex_lock(&watch_lock);
    int i = 0;
    while (i < nwatched && watched[i].fd != fd) i++;
    if (events && i < nwatched) {
        watched[i].events = events;
    } else if (events && i < MAX_WATCHED) { /* more than that: the timeout covers them */
        watched[nwatched++] = (struct pollfd){.fd = fd, .events = events};
    } else if (!events && i < nwatched) {
        watched[i] = watched[--nwatched];
    }
    pthread_mutex_unlock(&watch_lock);
    ncclsim_nudge_proxies(); /* a sleeper polls the new set */
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

/* Sleep until a nudge, a watched socket or `ns` pass. */
static void sleep_until_event(uint32_t seen, long ns)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_wake_fd);
    if (wake_fd < 0) return;
    struct pollfd fds[MAX_WATCHED + 1];
    fds[0] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
    pthread_mutex_lock(&watch_lock);
    memcpy(fds + 1, watched, (size_t)nwatched * sizeof fds[0]);
    int n = 1 + nwatched;
    pthread_mutex_unlock(&watch_lock);
    __atomic_fetch_add(&proxy_sleepers, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&proxy_events, __ATOMIC_SEQ_CST) == seen) {
        struct timespec ts = {0, ns};
        ppoll(fds, (nfds_t)n, &ts, NULL);
    }
    __atomic_fetch_sub(&proxy_sleepers, 1, __ATOMIC_SEQ_CST);
    uint64_t drained;
    if (read(wake_fd, &drained, sizeof drained) < 0) { /* nothing to drain */
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
    static __thread uint32_t seen;
    static __thread unsigned idle;
    uint32_t now = __atomic_load_n(&proxy_events, __ATOMIC_ACQUIRE);
    if (now != seen) {
        seen = now;
        idle = 0;
    }
    if (++idle < IDLE_YIELDS) return fn_();
    int e = errno;
    unsigned doublings = (idle - IDLE_YIELDS) < 6 ? idle - IDLE_YIELDS : 6;
    long ns = SLEEP_MIN_NS << doublings;
    sleep_until_event(seen, ns < SLEEP_MAX_NS ? ns : SLEEP_MAX_NS);
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
 * notices a finished thread that much later, once per group launch. */
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
        !(host_caller(ret) & HOST_CALLER_NCCL))
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
 * variable (std::condition_variable::notify_one, which calls
 * pthread_cond_signal; older releases call it directly). ncclsim's own
 * libraries only broadcast, so their stream hand-offs wake no proxy. */
EXPORT int pthread_cond_signal(pthread_cond_t *c)
{
    REAL(pthread_cond_signal);
    int r = fn_(c);
    ncclsim_nudge_proxies();
    return r;
}
