/* The entry points of libncclsim-host.so (fake_cuda/host/) that ncclsim's
 * other libraries call: declared weak, so each is NULL in a process that
 * runs without the host library preloaded, and the caller then does without
 * (real time instead of the modelled clock, polling instead of sleeping). */
#ifndef NCCLSIM_COMMON_HOST_LIB_H
#define NCCLSIM_COMMON_HOST_LIB_H

#include <stdbool.h>
#include <stdint.h>

#define NCCLSIM_HOST_API __attribute__((weak, visibility("default")))

/* The modelled clock (modelled_clock.c; the driver's side: modelled_time.c). */
NCCLSIM_HOST_API bool ncclsim_clock_modelled(void);
NCCLSIM_HOST_API uint64_t ncclsim_clock_now(void);
NCCLSIM_HOST_API uint64_t ncclsim_clock_advance(uint64_t ns);
NCCLSIM_HOST_API uint64_t ncclsim_clock_reach(uint64_t t);
NCCLSIM_HOST_API void ncclsim_clock_gpu_work(long delta);

/* Idle waiting (idle_wait.c; see idle.h). */
NCCLSIM_HOST_API void ncclsim_nudge_proxies(void);
/* Announce to the calling thread's device (all devices when it has none);
 * the count a thread sleeps on is its own device's. */
NCCLSIM_HOST_API void ncclsim_nudge_gpus(void);
NCCLSIM_HOST_API volatile uint32_t *ncclsim_gpu_nudges(void);
/* Around a sleep on ncclsim_gpu_nudges(): +1 before reading the word, -1
 * after; announcements with no sleeper then cost no system call. */
NCCLSIM_HOST_API void ncclsim_gpu_nudge_sleepers(int delta);
NCCLSIM_HOST_API void ncclsim_watch_fd(int fd, short events);
/* The device whose work the calling thread does from now on (-1: none):
 * what its nudges and watched sockets concern. */
NCCLSIM_HOST_API void ncclsim_thread_device(int dev);

/* A non-blocking receive or accept on fd would have found nothing, and the
 * caller, having asked poll() instead, skipped it: counted as such a call
 * is (wait_on_empty.c), so the thread yields or sleeps as it would have. */
NCCLSIM_HOST_API void ncclsim_found_empty(int fd);

/* NCCL launches a kernel: its init is over, and what it allocated then is
 * shared (pending_regions.c). */
NCCLSIM_HOST_API void ncclsim_shared_pages_settle(void);

/* Whether a return address lies in NCCL (callers.c). */
NCCLSIM_HOST_API bool ncclsim_caller_is_nccl(const void *ret);

#endif
