/* Part of libncclsim-host.so: the modelled clock (NCCLSIM_CLOCK=model).
 *
 * Under a modelled clock a program reads the time the simulated cluster
 * would take, not the emulation's. Its clock reads (clock_gettime on the
 * monotonic and real-time clocks, gettimeofday, time, std::chrono's
 * steady_clock and system_clock) answer the process's modelled time, which
 * moves only by modelled costs: the host work the simulated driver charges
 * for its calls (a kernel launch, a copy), the waits it ends (a stream
 * synchronisation moves it to the modelled completion of what was waited
 * for), a sleep's duration, and the cost of each clock read itself while no
 * GPU work is in flight (so a loop that waits for the clock to pass a
 * deadline ends; a loop that polls for GPU work, as nccl-tests' does, reads
 * for free and its time is the work's completion, however long the
 * emulation takes). Every process of a run
 * counts from the same epochs (NCCLSIM_CLOCK_EPOCH: the real and monotonic
 * clocks' nanoseconds at launch, "REAL,MONO"): the ranks of a modelled
 * cluster start together. Deadlines a program computes from its clock (timed
 * sleeps and waits) are modelled times too; they are turned into real ones
 * by their distance from the modelled now.
 *
 * Reads from NCCL's own code, the simulated driver, its libraries and MPI
 * stay on real time (the caller's library decides), so their timeouts and
 * heartbeats keep working; MPI_Wtime is real time too.
 *
 * The driver reaches this clock through the ncclsim_clock_* functions
 * (host_lib.h): a process without this library keeps real time. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "host_lib.h"
#include "interpose.h"

/* glibc declares some pointers nonnull; programs may pass NULL all the same,
 * and the real call then decides what happens. */
#pragma GCC diagnostic ignored "-Wnonnull-compare"

/* One read of a clock through the vDSO takes about 20-30 ns on x86-64
 * (clock_gettime(CLOCK_MONOTONIC), Linux's vDSO, no system call). */
#define CLOCK_READ_NS 25

static atomic_int state;          /* 0 unknown, 1 modelled, 2 real */
static uint64_t epoch_real, epoch_mono; /* modelled time 0 on the real-time and monotonic clocks */
static _Atomic uint64_t modelled; /* this process's modelled time since the epoch */
static atomic_long in_flight;     /* stream operations queued and not done (the driver counts) */

static uint64_t real_ns(clockid_t id);

static bool modelled_clock(void)
{
    int s = atomic_load_explicit(&state, memory_order_acquire);
    if (s) return s == 1;
    const char *c = getenv("NCCLSIM_CLOCK");
    bool on = c && !strcmp(c, "model");
    if (on) {
        const char *e = getenv("NCCLSIM_CLOCK_EPOCH");
        char *comma = NULL;
        epoch_real = e ? strtoull(e, &comma, 10) : 0;
        epoch_mono = comma && *comma == ',' ? strtoull(comma + 1, NULL, 10) : 0;
        if (!epoch_real || !epoch_mono) epoch_real = real_ns(CLOCK_REALTIME), epoch_mono = real_ns(CLOCK_MONOTONIC);
    }
    atomic_store_explicit(&state, on ? 1 : 2, memory_order_release);
    return on;
}

/* ---- what the driver calls ---- */

EXPORT bool ncclsim_clock_modelled(void) { return modelled_clock(); }

EXPORT uint64_t ncclsim_clock_now(void) { return atomic_load(&modelled); }

/* Host work of `ns` (the driver's modelled cost of a call); returns the time after it. */
EXPORT uint64_t ncclsim_clock_advance(uint64_t ns) { return atomic_fetch_add(&modelled, ns) + ns; }

/* Stream operations submitted (+1) and finished (-1). */
EXPORT void ncclsim_clock_gpu_work(long delta) { atomic_fetch_add(&in_flight, delta); }

/* A wait that ended at modelled time t: the clock moves there unless it is later already. */
EXPORT uint64_t ncclsim_clock_reach(uint64_t t)
{
    uint64_t now = atomic_load(&modelled);
    while (now < t && !atomic_compare_exchange_weak(&modelled, &now, t)) {
    }
    return now < t ? t : now;
}

/* ---- the clocks ---- */


static uint64_t real_ns(clockid_t id)
{
    REAL(clock_gettime);
    struct timespec ts;
    fn_(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t ns_of(const struct timespec *ts) { return (uint64_t)ts->tv_sec * 1000000000u + (uint64_t)ts->tv_nsec; }

static struct timespec timespec_of(uint64_t ns)
{
    return (struct timespec){.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
}

/* The modelled clocks' epochs; 0: the clock stays real. */
static uint64_t epoch_of(clockid_t id)
{
    if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) return epoch_real;
    if (id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_RAW || id == CLOCK_MONOTONIC_COARSE || id == CLOCK_BOOTTIME)
        return epoch_mono;
    return 0;
}

/* Is this a program's read of a modelled clock? */
static bool program_clock(const void *ret, clockid_t id)
{
    return modelled_clock() && epoch_of(id) && !(host_caller(ret) & HOST_CALLER_REAL_TIME);
}

/* The modelled time a program's read sees (a read costs CLOCK_READ_NS when
 * no GPU work is in flight). */
static int answer(const void *ret, clockid_t id, struct timespec *ts)
{
    if (!ts || !program_clock(ret, id)) return -1;
    uint64_t t = atomic_load(&in_flight) > 0 ? ncclsim_clock_now() : ncclsim_clock_advance(CLOCK_READ_NS);
    *ts = timespec_of(epoch_of(id) + t);
    return 0;
}

/* A program's absolute deadline on clock id, as a real one on the same clock:
 * as far from the real now as it is from the modelled now. */
static struct timespec real_deadline(clockid_t id, const struct timespec *deadline)
{
    uint64_t d = ns_of(deadline), now = epoch_of(id) + ncclsim_clock_now();
    return timespec_of(real_ns(id) + (d > now ? d - now : 0));
}

EXPORT int clock_gettime(clockid_t id, struct timespec *ts)
{
    if (answer(__builtin_return_address(0), id, ts) == 0) return 0;
    REAL(clock_gettime);
    return fn_(id, ts);
}

EXPORT int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    struct timespec ts;
    if (tv && answer(__builtin_return_address(0), CLOCK_REALTIME, &ts) == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
        if (tz) memset(tz, 0, sizeof(struct timezone));
        return 0;
    }
    REAL(gettimeofday);
    return fn_(tv, tz);
}

EXPORT time_t time(time_t *out)
{
    struct timespec ts;
    if (answer(__builtin_return_address(0), CLOCK_REALTIME, &ts) == 0) {
        if (out) *out = ts.tv_sec;
        return ts.tv_sec;
    }
    REAL(time);
    return fn_(out);
}

/* std::chrono::steady_clock::now() and system_clock::now() (libstdc++'s
 * _V2 ABI): nanoseconds since their epochs. Defined here so that a call from
 * a program is told apart from one from NCCL, which both reach libstdc++. */
EXPORT int64_t _ZNSt6chrono3_V212steady_clock3nowEv(void)
{
    struct timespec ts;
    if (answer(__builtin_return_address(0), CLOCK_MONOTONIC, &ts) != 0) {
        REAL(clock_gettime);
        fn_(CLOCK_MONOTONIC, &ts);
    }
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

EXPORT int64_t _ZNSt6chrono3_V212system_clock3nowEv(void)
{
    struct timespec ts;
    if (answer(__builtin_return_address(0), CLOCK_REALTIME, &ts) != 0) {
        REAL(clock_gettime);
        fn_(CLOCK_REALTIME, &ts);
    }
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- sleeping and timed waits: a program's modelled time passes by the
 * time it sleeps (it also sleeps for real, so that what it waits for
 * elsewhere can happen); a wait that times out ends at its deadline ---- */

static void program_sleeps(const void *ret, const struct timespec *req)
{
    if (req && req->tv_sec >= 0 && program_clock(ret, CLOCK_MONOTONIC)) ncclsim_clock_advance(ns_of(req));
}

EXPORT int nanosleep(const struct timespec *req, struct timespec *rem)
{
    program_sleeps(__builtin_return_address(0), req);
    REAL(nanosleep);
    struct timespec longer;
    return fn_(host_sleep_length(__builtin_return_address(0), req, &longer), rem);
}

EXPORT int clock_nanosleep(clockid_t id, int flags, const struct timespec *req, struct timespec *rem)
{
    REAL(clock_nanosleep);
    if (!(flags & TIMER_ABSTIME) || !req || !program_clock(__builtin_return_address(0), id)) {
        if (!(flags & TIMER_ABSTIME)) program_sleeps(__builtin_return_address(0), req);
        return fn_(id, flags, req, rem);
    }
    struct timespec until = real_deadline(id, req);
    int r = fn_(id, flags, &until, rem);
    if (r == 0) ncclsim_clock_reach(ns_of(req) - epoch_of(id));
    return r;
}

EXPORT int usleep(useconds_t us)
{
    struct timespec req = {us / 1000000, (long)(us % 1000000) * 1000}, longer;
    program_sleeps(__builtin_return_address(0), &req);
    const struct timespec *take = host_sleep_length(__builtin_return_address(0), &req, &longer);
    if (take != &req) {
        REAL(nanosleep);
        return fn_(take, NULL);
    }
    REAL(usleep);
    return fn_(us);
}

EXPORT unsigned sleep(unsigned s)
{
    struct timespec req = {s, 0}, rem = {0, 0};
    program_sleeps(__builtin_return_address(0), &req);
    REAL(nanosleep);
    return fn_(&req, &rem) == 0 ? 0 : (unsigned)rem.tv_sec;
}

/* Timed waits with a program's deadline on clock id (CLOCK_REALTIME for the
 * calls that name none): the real deadline, and on a timeout the modelled
 * clock at the deadline. */
#define TIMED_WAIT(ret, id, deadline, call)                                                      do {                                                                                             if (!(deadline) || !program_clock((ret), (id))) return (call);                               const struct timespec *modelled_deadline_ = (deadline);                                      struct timespec real_ = real_deadline((id), modelled_deadline_);                             (deadline) = &real_;                                                                         int r_ = (call);                                                                             if (r_ == ETIMEDOUT || (r_ == -1 && errno == ETIMEDOUT))                                         ncclsim_clock_reach(ns_of(modelled_deadline_) - epoch_of(id));                           return r_;                                                                               } while (0)

EXPORT int pthread_cond_timedwait(pthread_cond_t *restrict c, pthread_mutex_t *restrict m,
                                  const struct timespec *restrict abstime)
{
    REAL(pthread_cond_timedwait);
    TIMED_WAIT(__builtin_return_address(0), CLOCK_REALTIME, abstime, fn_(c, m, abstime));
}

EXPORT int pthread_cond_clockwait(pthread_cond_t *restrict c, pthread_mutex_t *restrict m, clockid_t id,
                                  const struct timespec *restrict abstime)
{
    REAL(pthread_cond_clockwait);
    TIMED_WAIT(__builtin_return_address(0), id, abstime, fn_(c, m, id, abstime));
}

EXPORT int sem_timedwait(sem_t *restrict s, const struct timespec *restrict abstime)
{
    REAL(sem_timedwait);
    TIMED_WAIT(__builtin_return_address(0), CLOCK_REALTIME, abstime, fn_(s, abstime));
}

EXPORT int sem_clockwait(sem_t *restrict s, clockid_t id, const struct timespec *restrict abstime)
{
    REAL(sem_clockwait);
    TIMED_WAIT(__builtin_return_address(0), id, abstime, fn_(s, id, abstime));
}
