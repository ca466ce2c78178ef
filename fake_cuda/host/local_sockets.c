/* Part of libncclsim-host.so: NCCL's TCP connections within one machine go
 * over Unix sockets.
 *
 * NCCL's bootstrap (its ring allgathers and the gathers of every rank's
 * topology), its requests to its proxies and its own socket transport run
 * over TCP. With every simulated host on one machine that is the loopback,
 * where each message goes down and up the whole TCP/IP stack: on a 2-core
 * machine a round trip of 64 B costs ~37 us of CPU over TCP against ~23 us
 * over a Unix socket, of 1 MiB ~1.5 ms against ~0.5 ms, and at 256 ranks and
 * more NCCL's init sends many millions of such messages.
 *
 * With NCCLSIM_LOCAL_SOCKETS=1 (launch sets it when every rank runs on this
 * machine):
 *  - a TCP socket that NCCL listens on becomes a Unix socket listening under
 *    a name made of the TCP socket's address and port. The descriptor NCCL
 *    holds becomes the Unix socket (same number, same flags); the TCP socket
 *    stays open beside it, bound, so that no other socket gets its port and
 *    the name stays unique, and closes with it;
 *  - NCCL's connect to an address with such a name connects the Unix socket
 *    instead, on the descriptor NCCL holds; any other address (a listener
 *    that is not NCCL's, another machine) is connected over TCP as before;
 *  - a connection accepted there reports the listener's own address (port
 *    0) as its peer, an address of the family NCCL asked for;
 *  - NCCL's TCP options on such a socket (TCP_NODELAY: a Unix socket sends
 *    at once anyway) are accepted and ignored.
 * NCCL reads and writes both kinds alike; nothing it decides changes. The
 * TCP socket beside a listener does not listen: a process of the run
 * without this library could not reach it (launch preloads it into every
 * rank), hence the setting's scope of one machine. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "interpose.h"

#define MAX_FD 65536 /* listeners numbered from this on stay TCP */
#define NAME_PREFIX "ncclsim-tcp:"

typedef union {
    struct sockaddr sa;
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
} tcp_addr;

typedef struct {
    int tcp_fd; /* the TCP socket, bound: holds the port */
    tcp_addr addr;
    socklen_t len;
} listener;

static listener *listeners[MAX_FD];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static bool enabled(void)
{
    static int on = -1; /* -1: not read yet */
    int v = __atomic_load_n(&on, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *e = getenv("NCCLSIM_LOCAL_SOCKETS");
        v = e && !strcmp(e, "1");
        __atomic_store_n(&on, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* The Unix (abstract) name of a TCP address; 0 for any other address, or a
 * wildcard one (a connect names a host, and would not find it). */
static socklen_t unix_name(const struct sockaddr *a, socklen_t len, struct sockaddr_un *u)
{
    char host[INET6_ADDRSTRLEN];
    unsigned port;
    if (a->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)a;
        if (in->sin_addr.s_addr == htonl(INADDR_ANY)) return 0;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        port = ntohs(in->sin_port);
    } else if (a->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)a;
        if (!memcmp(&in6->sin6_addr, &in6addr_any, sizeof in6addr_any)) return 0;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        port = ntohs(in6->sin6_port);
    } else {
        return 0;
    }
    memset(u, 0, sizeof *u);
    u->sun_family = AF_UNIX;
    int n = snprintf(u->sun_path + 1, sizeof u->sun_path - 1, NAME_PREFIX "%s:%u", host, port);
    if (n <= 0 || (size_t)n >= sizeof u->sun_path - 1) return 0;
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Put Unix socket u in fd's place, with fd's status flags (O_NONBLOCK) and
 * close-on-exec; u is closed either way. */
static bool take_place(int u, int fd)
{
    int status = fcntl(fd, F_GETFL), fdflags = fcntl(fd, F_GETFD);
    bool ok = status >= 0 && fdflags >= 0 && fcntl(u, F_SETFL, status & O_NONBLOCK) == 0 &&
              dup3(u, fd, fdflags & FD_CLOEXEC ? O_CLOEXEC : 0) == fd;
    close(u);
    return ok;
}

/* fd's TCP socket listens as a Unix socket (see above); false: it did not. */
static bool listen_local(int fd, int backlog, int (*real_listen)(int, int))
{
    listener *l = fd >= 0 && fd < MAX_FD ? calloc(1, sizeof *l) : NULL;
    if (!l) return false;
    l->len = sizeof l->addr;
    struct sockaddr_un name;
    socklen_t name_len;
    if (getsockname(fd, &l->addr.sa, &l->len) != 0 || !host_stream_socket(fd) ||
        !(name_len = unix_name(&l->addr.sa, l->len, &name))) {
        free(l);
        return false;
    }
    int u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (u < 0) {
        free(l);
        return false;
    }
    l->tcp_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    bool ready = l->tcp_fd >= 0 && bind(u, (struct sockaddr *)&name, name_len) == 0 && real_listen(u, backlog) == 0;
    if (!ready) close(u);
    if (!ready || !take_place(u, fd)) {
        if (l->tcp_fd >= 0) close(l->tcp_fd);
        free(l);
        return false;
    }
    pthread_mutex_lock(&lock);
    listener *old = listeners[fd];
    __atomic_store_n(&listeners[fd], l, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    if (old) { /* its descriptor was closed some way other than close() */
        close(old->tcp_fd);
        free(old);
    }
    return true;
}

EXPORT int listen(int fd, int backlog)
{
    REAL(listen);
    if (enabled() && host_caller(__builtin_return_address(0)) & HOST_CALLER_NCCL) {
        int e = errno;
        if (listen_local(fd, backlog, fn_)) return 0;
        errno = e;
    }
    return fn_(fd, backlog);
}

EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    REAL(connect);
    struct sockaddr_un name;
    socklen_t name_len;
    if (!enabled() || !addr || !(host_caller(__builtin_return_address(0)) & HOST_CALLER_NCCL) ||
        !(name_len = unix_name(addr, len, &name)) || !host_stream_socket(fd))
        return fn_(fd, addr, len);
    int e = errno;
    int status = fcntl(fd, F_GETFL);
    int u = status < 0 ? -1 : socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (status & O_NONBLOCK ? SOCK_NONBLOCK : 0), 0);
    if (u < 0) {
        errno = e;
        return fn_(fd, addr, len);
    }
    if (fn_(u, (struct sockaddr *)&name, name_len) != 0) {
        int err = errno;
        close(u);
        if (err == EAGAIN) { /* its queue is full: NCCL tries again as for TCP */
            errno = EAGAIN;
            return -1;
        }
        errno = e; /* no such listener here: TCP */
        return fn_(fd, addr, len);
    }
    if (!take_place(u, fd)) {
        errno = e;
        return fn_(fd, addr, len);
    }
    errno = e;
    return 0;
}

void host_accepted(int listen_fd, struct sockaddr *addr, socklen_t *len, socklen_t room)
{
    if (!addr || !len || listen_fd < 0 || listen_fd >= MAX_FD ||
        !__atomic_load_n(&listeners[listen_fd], __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&lock);
    const listener *l = listeners[listen_fd];
    if (l) {
        tcp_addr peer = l->addr;
        if (peer.sa.sa_family == AF_INET)
            peer.in.sin_port = 0;
        else
            peer.in6.sin6_port = 0;
        memcpy(addr, &peer, room < l->len ? room : l->len);
        *len = l->len;
    }
    pthread_mutex_unlock(&lock);
}

EXPORT int setsockopt(int fd, int level, int name, const void *value, socklen_t len)
{
    REAL(setsockopt);
    int r = fn_(fd, level, name, value, len);
    if (r != 0 && errno == EOPNOTSUPP && level == IPPROTO_TCP && enabled()) {
        struct sockaddr_storage a;
        socklen_t alen = sizeof a;
        int e = errno;
        if (getsockname(fd, (struct sockaddr *)&a, &alen) == 0 && a.ss_family == AF_UNIX) return 0;
        errno = e;
    }
    return r;
}

EXPORT int close(int fd)
{
    REAL(close);
    if (fd >= 0 && fd < MAX_FD && __atomic_load_n(&listeners[fd], __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&lock);
        listener *l = listeners[fd];
        __atomic_store_n(&listeners[fd], NULL, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&lock);
        if (l) {
            fn_(l->tcp_fd);
            free(l);
        }
    }
    return fn_(fd);
}
