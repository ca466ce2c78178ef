/* Waking the threads that sleep on a 32-bit word (futex), in any process
 * that maps it. A header of its own: the host library, whose entry points
 * idle.h's helpers call, needs it without those helpers. */
#ifndef NCCLSIM_COMMON_FUTEX_WAKE_H
#define NCCLSIM_COMMON_FUTEX_WAKE_H

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline void fc_futex_wake(const volatile void *word)
{
    syscall(SYS_futex, (void *)word, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

#endif
