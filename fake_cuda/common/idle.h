/* Waiting without burning the CPU: how the threads of a rank process that
 * wait for one another sleep and get woken.
 *
 * A simulated cluster runs many more waiting threads than the machine has
 * cores: every rank's emulated GPU (its stream workers) and NCCL's proxy
 * threads. A waiter that polls takes the CPU from the thread it waits for.
 * So:
 *  - an emulated GPU waiting for a word (a head, a tail, an LL flag) sleeps on
 *    that word (futex); whoever of ncclsim writes such a word wakes it
 *    (fc_wake_word), in this process or another one sharing the memory,
 *    when the host's wake board says someone may sleep there
 *    (wake_board.h);
 *  - NCCL's proxy ("progress") threads, which poll in a loop that yields, sleep
 *    in the preloaded host library until their rank's emulated GPU posts
 *    something (fc_nudge_proxies; fc_thread_device says whose work a thread
 *    does), NCCL's host code signals a condition variable, or a socket the
 *    net plugin waits on for them becomes ready (fc_watch_fd);
 *  - the words NCCL's proxy writes (a NET connection's head and tail) cannot
 *    be watched: the net plugin announces a completed request
 *    (fc_nudge_gpus), after which the proxy writes them, and an emulated GPU
 *    waiting on such a word wakes on that announcement (its own rank's:
 *    fc_thread_device) and polls briefly.
 * The process-wide parts live in libncclsim-host.so (preloaded into ranks);
 * without it every waiter falls back to polling with back-off. */
#ifndef NCCLSIM_COMMON_IDLE_H
#define NCCLSIM_COMMON_IDLE_H

#include <stdbool.h>
#include <stdint.h>

#include "futex_wake.h"
#include "host_lib.h"
#include "wake_board.h"

static inline void fc_nudge_proxies(void)
{
    if (ncclsim_nudge_proxies) ncclsim_nudge_proxies();
}

static inline void fc_nudge_gpus(void)
{
    if (ncclsim_nudge_gpus) ncclsim_nudge_gpus();
}

/* After writing a word an emulated GPU may wait for, named `key` on the
 * wake board (0: unknown); `proxy`: NCCL's proxy may wait for it too (a
 * connection with a FIFO: the network's). */
static inline void fc_wake_word(const volatile void *word, uint64_t key, bool proxy)
{
    if (fc_wake_board_may_sleep(key)) fc_futex_wake(word);
    if (proxy) fc_nudge_proxies();
}

/* The calling thread works for device `dev` (-1: none) from now on. */
static inline void fc_thread_device(int dev)
{
    if (ncclsim_thread_device) ncclsim_thread_device(dev);
}

/* Watch fd for `events` (POLLIN, POLLOUT; 0: stop watching) while proxies sleep. */
static inline void fc_watch_fd(int fd, short events)
{
    if (ncclsim_watch_fd) ncclsim_watch_fd(fd, events);
}

#endif
