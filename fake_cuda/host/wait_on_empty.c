/* Part of libncclsim-host.so. NCCL waits for bootstrap peers and for its
 * proxy thread's answers by calling non-blocking recv()/accept() in a loop
 * (the ring allgathers of ncclCommInitRank: every rank waits for its
 * neighbours). A simulated cluster runs many more such threads than this
 * machine has cores; spinning, even with a yield per empty call, they take
 * the CPU from the threads they wait for, and a ring of N ranks costs a
 * pass over all N spinning threads per hand-off.
 *
 * Here a call that finds nothing (EAGAIN) gives the CPU up once; after
 * EMPTY_YIELDS empty calls in a row (with no call in between that found
 * something) the thread sleeps in poll() on the sockets it found empty, up to
 * MAX_SOCKETS of them (a ring allgather receives from both neighbours),
 * until one is readable, or WAIT_MS pass (the loop may also wait to send:
 * it gets to try again). A thread that cycles over more sockets than that
 * only yields. NCCL's proxy service thread, while connections it sets up are
 * pending, loops over poll() without a timeout and the net plugin's
 * non-blocking accept and connect: it sleeps the same way, on those sockets
 * and on the ones its last poll() looked at (its peers' requests). Results
 * and errno are unchanged, so nothing NCCL decides changes. NCCL's proxy
 * progress threads only yield here (idle_wait.c has their sleep). */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "interpose.h"

#define EMPTY_YIELDS 16
#define MAX_SOCKETS 16
#define MAX_POLLED 64
#define WAIT_MS 1

static __thread struct {
    unsigned empties; /* empty calls in a row */
    int n;            /* sockets they were on; MAX_SOCKETS + 1: more than that */
    struct pollfd fds[MAX_SOCKETS + MAX_POLLED];
} streak;

/* What an NCCL thread's last poll() without a timeout looked at; -1: none
 * or more than MAX_POLLED. */
static __thread struct {
    int n;
    struct pollfd fds[MAX_POLLED];
} polled = {.n = -1};

EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    REAL(poll);
    if (timeout == 0 && host_thread_kind() == HOST_THREAD_NCCL) {
        polled.n = n <= MAX_POLLED ? (int)n : -1;
        for (int i = 0; i < polled.n; i++) polled.fds[i] = (struct pollfd){.fd = fds[i].fd, .events = fds[i].events};
    }
    return fn_(fds, n, timeout);
}

static void note_empty(int fd)
{
    for (int i = 0; i < streak.n && i < MAX_SOCKETS; i++)
        if (streak.fds[i].fd == fd) return;
    if (streak.n < MAX_SOCKETS) streak.fds[streak.n] = (struct pollfd){.fd = fd, .events = POLLIN};
    if (streak.n <= MAX_SOCKETS) streak.n++;
}

static void wait_if_empty(int fd, long r)
{
    if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        streak.empties = 0;
        streak.n = 0;
        return;
    }
    int e = errno;
    note_empty(fd);
    enum host_thread kind = host_thread_kind();
    bool sleeps = ++streak.empties >= EMPTY_YIELDS && streak.n <= MAX_SOCKETS &&
                 (kind == HOST_THREAD_OTHER || (kind == HOST_THREAD_NCCL && polled.n >= 0));
    if (!sleeps) {
        host_yield(); /* not one that may sleep: idle_wait.c */
    } else {
        int n = streak.n;
        if (kind == HOST_THREAD_NCCL) { /* and on what it polls */
            memcpy(streak.fds + n, polled.fds, (size_t)polled.n * sizeof polled.fds[0]);
            n += polled.n;
        }
        REAL(poll);
        fn_(streak.fds, (nfds_t)n, WAIT_MS);
    }
    errno = e;
}

EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    REAL(recv);
    ssize_t r = fn_(fd, buf, n, flags);
    wait_if_empty(fd, r);
    return r;
}

EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr, socklen_t *len)
{
    REAL(recvfrom);
    ssize_t r = fn_(fd, buf, n, flags, addr, len);
    wait_if_empty(fd, r);
    return r;
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    REAL(recvmsg);
    ssize_t r = fn_(fd, msg, flags);
    wait_if_empty(fd, r);
    return r;
}

EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    REAL(accept);
    int r = fn_(fd, addr, len);
    wait_if_empty(fd, r);
    return r;
}

EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    REAL(accept4);
    int r = fn_(fd, addr, len, flags);
    wait_if_empty(fd, r);
    return r;
}
