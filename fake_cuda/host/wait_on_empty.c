/* Part of libncclsim-host.so. NCCL waits for bootstrap peers and for its
 * proxy thread's answers by calling non-blocking recv()/accept() in a loop
 * (the ring allgathers of ncclCommInitRank: every rank waits for its
 * neighbours). A simulated cluster runs many more such threads than this
 * machine has cores; spinning, even with a yield per empty call, they take
 * the CPU from the threads they wait for, and a ring of N ranks costs a
 * pass over all N spinning threads per hand-off.
 *
 * Here a call that finds nothing (EAGAIN) gives the CPU up once. After
 * EMPTY_YIELDS empty calls in a row (with no call in between that found
 * something) the thread sleeps instead, once per pass over the sockets it
 * finds empty (a pass ends where a socket comes round again: a ring
 * allgather receives from both neighbours, NCCL's proxy service thread
 * tries every connection it sets up), in poll() on all of them,
 * up to MAX_SOCKETS, until one is readable or the timeout passes (the loop
 * may wait for something else too, to send for instance: it gets to try
 * again). The timeout starts at WAIT_MIN_MS and doubles, up to WAIT_MAX_MS,
 * while sleeps end with nothing readable: at a thousand simulated ranks,
 * threads that woke every millisecond would take the machine. A thread that
 * cycles over more sockets than MAX_SOCKETS only yields. NCCL's proxy
 * service thread, while connections it sets up are pending, loops over
 * poll() without a timeout and the net plugin's non-blocking accept and
 * connect: it sleeps the same way, on those sockets and on the ones NCCL's
 * last poll() looked at (its peers' requests). Results and errno are
 * unchanged, so nothing NCCL decides changes. NCCL's proxy progress threads
 * do neither here: their loop yields once per pass and sleeps when passes
 * find nothing (idle_wait.c). */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "interpose.h"

#define EMPTY_YIELDS 16
#define MAX_SOCKETS 64
#define MAX_POLLED 64
#define WAIT_MIN_MS 1
#define WAIT_MAX_MS 32

static __thread struct {
    unsigned empties; /* empty calls in a row */
    unsigned pass;    /* of them since the last sleep */
    int wait_ms;      /* the next sleep's timeout; 0: WAIT_MIN_MS */
    int n;            /* sockets they were on; MAX_SOCKETS + 1: more than that */
    struct pollfd fds[MAX_SOCKETS + MAX_POLLED];
} streak;

/* What an NCCL thread's last poll() without a timeout from NCCL's own code
 * looked at (not the plugin's: its poll of a connecting socket would stand
 * for the service thread's); -1: none or more than MAX_POLLED. */
static __thread struct {
    int n;
    struct pollfd fds[MAX_POLLED];
} polled = {.n = -1};

EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    REAL(poll);
    bool long_wait = timeout < 0 || timeout >= HOST_LONG_POLL_MS;
    if ((timeout == 0 || long_wait) && host_thread_kind() == HOST_THREAD_NCCL &&
        host_caller(__builtin_return_address(0)) & HOST_CALLER_NCCL) {
        if (long_wait) return host_poll_wakeable(fn_, fds, n, timeout);
        polled.n = n <= MAX_POLLED ? (int)n : -1;
        for (int i = 0; i < polled.n; i++) polled.fds[i] = (struct pollfd){.fd = fds[i].fd, .events = fds[i].events};
    }
    return fn_(fds, n, timeout);
}

/* Adds fd to the streak's sockets; true if it was there (a pass is over). */
static bool note_empty(int fd)
{
    for (int i = 0; i < streak.n && i < MAX_SOCKETS; i++)
        if (streak.fds[i].fd == fd) return true;
    if (streak.n < MAX_SOCKETS) streak.fds[streak.n] = (struct pollfd){.fd = fd, .events = POLLIN};
    if (streak.n <= MAX_SOCKETS) streak.n++;
    return false;
}

static void sleep_on_streak(enum host_thread kind)
{
    int n = streak.n;
    if (kind == HOST_THREAD_NCCL) { /* and on what it polls */
        memcpy(streak.fds + n, polled.fds, (size_t)polled.n * sizeof polled.fds[0]);
        n += polled.n;
    }
    int ms = streak.wait_ms ? streak.wait_ms : WAIT_MIN_MS;
    REAL(poll);
    int ready = fn_(streak.fds, (nfds_t)n, ms);
    streak.wait_ms = ready != 0 ? WAIT_MIN_MS : ms * 2 < WAIT_MAX_MS ? ms * 2 : WAIT_MAX_MS;
    streak.pass = 0;
}

static void wait_if_empty(int fd, long r)
{
    if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        streak.empties = 0;
        streak.pass = 0;
        streak.wait_ms = 0;
        streak.n = 0;
        return;
    }
    enum host_thread kind = host_thread_kind();
    if (kind == HOST_THREAD_PROGRESS) return; /* its loop yields once per pass (idle_wait.c) */
    int e = errno;
    bool again = note_empty(fd);
    streak.pass++;
    bool sleeper = ++streak.empties >= EMPTY_YIELDS && streak.n <= MAX_SOCKETS &&
                   (kind == HOST_THREAD_OTHER || (kind == HOST_THREAD_NCCL && polled.n >= 0));
    if (sleeper && again && streak.pass >= (unsigned)streak.n)
        sleep_on_streak(kind);
    else if (!sleeper)
        host_yield();
    errno = e;
}

EXPORT void ncclsim_found_empty(int fd)
{
    int e = errno;
    errno = EAGAIN;
    wait_if_empty(fd, -1);
    errno = e;
}

EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    REAL(recv);
    ssize_t r = host_recv(fn_, fd, buf, n, flags, __builtin_return_address(0));
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
    socklen_t room = len ? *len : 0;
    int r = fn_(fd, addr, len);
    if (r >= 0) host_accepted(fd, addr, len, room);
    wait_if_empty(fd, r);
    return r;
}

EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    REAL(accept4);
    socklen_t room = len ? *len : 0;
    int r = fn_(fd, addr, len, flags);
    if (r >= 0) host_accepted(fd, addr, len, room);
    wait_if_empty(fd, r);
    return r;
}
