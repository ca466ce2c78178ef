/* Part of libncclsim-host.so: a thread that is being joined does not sleep
 * out a long poll.
 *
 * Some of NCCL's service threads (its UDS service thread, one per
 * communicator) wait in poll() with a 500 ms timeout and look at their stop
 * flag only when it returns; ncclCommDestroy sets the flag and joins the
 * thread, which nothing wakes: every destroy waited up to half a second, a
 * third of a small simulated run. Here such a poll (NCCL's, from one of its
 * named threads, HOST_LONG_POLL_MS or longer) also watches an eventfd of its
 * thread, which pthread_join writes: the poll then returns as if its timeout
 * had passed, NCCL sees its stop flag and the thread ends. A wake that comes
 * before the thread polls again ends that next poll at once; a joined thread
 * is about to end, and at worst its loop polls once more. Any other poll, and
 * the results of this one for the caller's own descriptors, are unchanged. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "interpose.h"
#include "thread_exit.h"

/* Threads with a wake descriptor at once (NCCL's service threads of every
 * communicator of the process); past that, a poll sleeps as before. */
#define MAX_WAKEABLE 256
/* The caller's descriptors a wakeable poll takes (on the stack). */
#define MAX_FDS 256

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    pthread_t thread;
    int fd; /* -1: free */
} wakeable[MAX_WAKEABLE];
static int n_wakeable; /* entries in use or freed: the scan's end */

static __thread int wake_fd = -1; /* -2: none could be made */

/* At the thread's end: its entry goes before its descriptor closes, so a
 * join never writes to a descriptor that was closed (and perhaps reused). */
static void forget(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_wakeable; i++)
        if (wakeable[i].fd == wake_fd) wakeable[i].fd = -1;
    pthread_mutex_unlock(&lock);
    close(wake_fd);
    wake_fd = -1;
}
static fc_thread_exit wake_fd_exit = FC_THREAD_EXIT_INIT(forget);

/* This thread's wake descriptor, made and registered on first use; -1: none. */
static int own_wake_fd(void)
{
    if (wake_fd != -1) return wake_fd >= 0 ? wake_fd : -1;
    wake_fd = -2;
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) return -1;
    pthread_mutex_lock(&lock);
    int slot = -1;
    for (int i = 0; i < n_wakeable && slot < 0; i++)
        if (wakeable[i].fd < 0) slot = i;
    if (slot < 0 && n_wakeable < MAX_WAKEABLE) slot = n_wakeable++;
    if (slot >= 0) wakeable[slot].thread = pthread_self(), wakeable[slot].fd = fd;
    pthread_mutex_unlock(&lock);
    if (slot < 0 || !fc_thread_exit_arm(&wake_fd_exit, &wake_fd)) {
        if (slot >= 0) {
            pthread_mutex_lock(&lock);
            wakeable[slot].fd = -1;
            pthread_mutex_unlock(&lock);
        }
        close(fd);
        return -1;
    }
    wake_fd = fd;
    return fd;
}

int host_poll_wakeable(int (*real_poll)(struct pollfd *, nfds_t, int), struct pollfd *fds, nfds_t n, int timeout)
{
    int fd = n < MAX_FDS ? own_wake_fd() : -1;
    if (fd < 0) return real_poll(fds, n, timeout);
    struct pollfd all[MAX_FDS];
    memcpy(all, fds, n * sizeof *fds);
    all[n] = (struct pollfd){.fd = fd, .events = POLLIN};
    int r = real_poll(all, n + 1, timeout);
    int e = errno;
    for (nfds_t i = 0; i < n; i++) fds[i].revents = all[i].revents; /* set by every poll, 0 at a timeout */
    if (r > 0 && all[n].revents) {
        uint64_t count;
        if (read(fd, &count, sizeof count) < 0) { /* drained by an earlier read: nothing to do */
        }
        r--;
    }
    errno = e;
    return r; /* 0 when only the join woke it: as if the timeout had passed */
}

EXPORT int pthread_join(pthread_t thread, void **result)
{
    REAL(pthread_join);
    int e = errno;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_wakeable; i++) {
        if (wakeable[i].fd >= 0 && pthread_equal(wakeable[i].thread, thread)) {
            uint64_t one = 1;
            if (write(wakeable[i].fd, &one, sizeof one) < 0) { /* a full counter still wakes */
            }
        }
    }
    pthread_mutex_unlock(&lock);
    errno = e;
    return fn_(thread, result);
}
