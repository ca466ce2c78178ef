/* A program that asks again and again whether a stream or an event is done
 * (nccl-tests' synchronisation loop, a framework polling for completion)
 * keeps a core busy. On a real machine that core is the host's own; here it
 * is one the emulated GPUs need to finish the work asked about. So after a
 * few misses in a row a query waits for the work (woken as soon as it
 * completes), at most a time that doubles from 1 us to 1 ms; a query that
 * finds the work done starts over. The answer is the same a real GPU would
 * give a little later, and no modelled time passes (streams.c, events.c).
 * NCCL's own queries (its launch path checks events it just recorded) are
 * answered at once: only the program's are held, as told by the host
 * library (without it, none is). */
#include <time.h>

#include "host_lib.h"
#include "internal.h"

#define QUERY_FREE_MISSES 4     /* a program that looks once or twice is not held */
#define QUERY_WAIT_MIN_NS 1000L /* 1 us */
#define QUERY_WAIT_MAX_NS 1000000L

static __thread unsigned misses; /* not-done answers in a row, this thread */

bool fc_query_wait(bool done, const void *caller, struct timespec *until)
{
    if (!ncclsim_caller_is_nccl || ncclsim_caller_is_nccl(caller)) return false;
    if (done) {
        misses = 0;
        return false;
    }
    if (++misses <= QUERY_FREE_MISSES) return false;
    unsigned doublings = misses - QUERY_FREE_MISSES - 1;
    long ns = QUERY_WAIT_MAX_NS;
    if (doublings < 10 && (QUERY_WAIT_MIN_NS << doublings) < ns) ns = QUERY_WAIT_MIN_NS << doublings;
    clock_gettime(CLOCK_MONOTONIC, until);
    until->tv_nsec += ns;
    if (until->tv_nsec >= 1000000000L) {
        until->tv_sec++;
        until->tv_nsec -= 1000000000L;
    }
    return true;
}
