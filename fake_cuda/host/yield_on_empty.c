/* Part of libncclsim-host.so. NCCL waits for its proxy thread's answers and
 * for bootstrap peers by calling non-blocking recv()/accept() in a loop. A
 * simulated cluster runs many more NCCL threads than this machine has cores,
 * and those spinning threads take the CPU from the threads they wait for
 * (connection setup of 16 ranks on 2 cores: 10-20x slower, see
 * benchmarks/README.md). Here such a call that finds nothing (EAGAIN) gives
 * the CPU up once; results and errno are unchanged, so nothing NCCL decides
 * changes. */
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "interpose.h"

static void yield_if_empty(long r)
{
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        int e = errno;
        host_yield(); /* not one that may sleep: idle_wait.c */
        errno = e;
    }
}


EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    REAL(recv);
    ssize_t r = fn_(fd, buf, n, flags);
    yield_if_empty(r);
    return r;
}

EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr, socklen_t *len)
{
    REAL(recvfrom);
    ssize_t r = fn_(fd, buf, n, flags, addr, len);
    yield_if_empty(r);
    return r;
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    REAL(recvmsg);
    ssize_t r = fn_(fd, msg, flags);
    yield_if_empty(r);
    return r;
}

EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    REAL(accept);
    int r = fn_(fd, addr, len);
    yield_if_empty(r);
    return r;
}

EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    REAL(accept4);
    int r = fn_(fd, addr, len, flags);
    yield_if_empty(r);
    return r;
}
