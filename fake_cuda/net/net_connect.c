/* listen / connect / accept over TCP (net_address.c picks the interface), all non-blocking in NCCL's
 * sense: connect and accept answer ncclSuccess with a NULL comm until the
 * connection is ready, and NCCL calls again.
 *
 * The handle carries the listener's address and a random key. connect()
 * keeps its progress in the handle itself (NCCL passes the same handle
 * buffer on every retry, as its own socket plugin relies on); the connector
 * then sends a hello {magic, key} so that accept() only hands out
 * connections meant for this listener. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "idle.h"
#include "net_comm.h"
#include "net_core.h"

#define FCN_HANDLE_MAGIC 0x6e63636c73696d31ull /* "ncclsim1" */
#define FCN_LISTEN_MAGIC 0x6e736c6eu
#define FCN_MAX_PENDING 64 /* accepted sockets still waiting for their hello */

typedef struct fcn_hello {
    uint64_t magic;
    uint64_t key;
} fcn_hello;

typedef struct fcn_connecting {
    fcn_comm *comm;
    int connected; /* TCP handshake done; now sending the hello */
    size_t hello_off;
    fcn_hello hello;
} fcn_connecting;

typedef struct fcn_handle {
    uint64_t magic;
    uint64_t key;
    struct sockaddr_in addr; /* the listener */
    int32_t dev;
    int32_t reserved;
    fcn_connecting *pending; /* connect()'s progress; NULL as listen() writes it */
} fcn_handle;
_Static_assert(sizeof(fcn_handle) <= NCCL_NET_HANDLE_MAXSIZE, "handle exceeds NCCL's 128 bytes");

typedef struct fcn_listen_comm {
    uint32_t magic;
    int fd;
    int dev;
    uint64_t key;
    pthread_mutex_t lock;
    struct {
        int fd;
        size_t off;
        fcn_hello hello;
    } pending[FCN_MAX_PENDING];
    int npending;
} fcn_listen_comm;

static uint64_t random_key(void)
{
    uint64_t k = 0;
    if (getrandom(&k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        k = ((uint64_t)t.tv_sec << 32) ^ (uint64_t)t.tv_nsec ^ ((uint64_t)getpid() << 16);
    }
    return k ? k : 1;
}

/* Non-blocking (progress never waits), close-on-exec, no Nagle delay:
 * NCCL's messages are latency-bound steps. */
static int tune(int fd)
{
    int one = 1;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -1;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) return -1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* An address for messages (thread-safe, unlike inet_ntoa). */
typedef struct { char s[INET_ADDRSTRLEN]; } addr_text;
static addr_text text_of(struct in_addr a)
{
    addr_text t;
    if (!inet_ntop(AF_INET, &a, t.s, sizeof t.s)) snprintf(t.s, sizeof t.s, "?");
    return t;
}

static fcn_comm *comm_new(int kind, int fd, int dev)
{
    fcn_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->magic = FCN_COMM_MAGIC;
    c->kind = kind;
    c->fd = fd;
    c->dev = dev;
    c->wire_req = -1;
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

static void comm_free(fcn_comm *c)
{
    free(c->packed);
    if (c->watched) fc_watch_fd(c->fd, 0);
    if (c->fd >= 0) close(c->fd);
    pthread_mutex_destroy(&c->lock);
    c->magic = 0;
    free(c);
}

ncclResult_t fcn_listen(int dev, void *handle, void **listen_comm)
{
    int n;
    if (!handle || !listen_comm) return ncclInvalidArgument;
    if (fcn_devices(&n) != ncclSuccess || dev < 0 || dev >= n) {
        FCN_WARN("listen: no device %d", dev);
        return ncclInvalidArgument;
    }
    struct sockaddr_in a = {.sin_family = AF_INET};
    const char *ifname;
    if (!fcn_listen_address(&a.sin_addr, &ifname)) {
        FCN_WARN("listen: no up IPv4 interface matches NCCL_SOCKET_IFNAME=%s",
                 getenv("NCCL_SOCKET_IFNAME") ? getenv("NCCL_SOCKET_IFNAME") : "(unset)");
        return ncclSystemError;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t alen = sizeof a;
    if (fd < 0 || tune(fd) < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        listen(fd, SOMAXCONN) < 0 || getsockname(fd, (struct sockaddr *)&a, &alen) < 0) {
        FCN_WARN("listen: socket on %s (%s) failed: %s", ifname, text_of(a.sin_addr).s,
                 strerror(errno));
        if (fd >= 0) close(fd);
        return ncclSystemError;
    }
    fcn_listen_comm *l = calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        return ncclSystemError;
    }
    l->magic = FCN_LISTEN_MAGIC;
    l->fd = fd;
    l->dev = dev;
    l->key = random_key();
    pthread_mutex_init(&l->lock, NULL);

    memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE); /* NCCL may hand in uninitialised memory */
    fcn_handle *h = handle;
    h->magic = FCN_HANDLE_MAGIC;
    h->key = l->key;
    h->addr = a;
    h->dev = dev;
    *listen_comm = l;
    FCN_TRACE("listen dev %d on %s:%d", dev, text_of(a.sin_addr).s, ntohs(a.sin_port));
    return ncclSuccess;
}

static ncclResult_t connect_fail(fcn_handle *h, const char *what, int err)
{
    FCN_WARN("connect to %s:%d: %s: %s", text_of(h->addr.sin_addr).s, ntohs(h->addr.sin_port), what,
             strerror(err));
    if (h->pending) {
        comm_free(h->pending->comm);
        free(h->pending);
        h->pending = NULL;
    }
    return err == ECONNREFUSED || err == ECONNRESET || err == EPIPE ? ncclRemoteError
                                                                    : ncclSystemError;
}

ncclResult_t fcn_connect(int dev, void *handle, void **send_comm)
{
    if (!handle || !send_comm) return ncclInvalidArgument;
    fcn_handle *h = handle;
    *send_comm = NULL;
    if (h->magic != FCN_HANDLE_MAGIC) {
        FCN_WARN("connect: the handle was not made by this plugin's listen()");
        return ncclInvalidUsage;
    }
    if (!h->pending) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || tune(fd) < 0) {
            int err = errno;
            if (fd >= 0) close(fd);
            return connect_fail(h, "socket", err);
        }
        fcn_connecting *p = calloc(1, sizeof *p);
        fcn_comm *c = comm_new(FCN_SEND_COMM, fd, dev);
        if (!p || !c) {
            free(p);
            if (c) comm_free(c); else close(fd);
            return ncclSystemError;
        }
        p->comm = c;
        p->hello = (fcn_hello){.magic = FCN_HANDLE_MAGIC, .key = h->key};
        h->pending = p;
        if (connect(fd, (struct sockaddr *)&h->addr, sizeof h->addr) == 0)
            p->connected = 1;
        else if (errno != EINPROGRESS && errno != EINTR)
            return connect_fail(h, "connect", errno);
    }
    fcn_connecting *p = h->pending;
    int fd = p->comm->fd;
    if (!p->connected) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        if (poll(&pfd, 1, 0) <= 0) return ncclSuccess; /* still connecting */
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
        if (err) return connect_fail(h, "connect", err);
        p->connected = 1;
    }
    while (p->hello_off < sizeof p->hello) {
        ssize_t k = send(fd, (char *)&p->hello + p->hello_off, sizeof p->hello - p->hello_off,
                         MSG_NOSIGNAL);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return ncclSuccess;
        if (k < 0) return connect_fail(h, "hello", errno);
        p->hello_off += (size_t)k;
    }
    *send_comm = p->comm;
    free(p);
    h->pending = NULL;
    FCN_TRACE("connected dev %d to %s:%d", dev, text_of(h->addr.sin_addr).s, ntohs(h->addr.sin_port));
    return ncclSuccess;
}

static void drop_pending(fcn_listen_comm *l, int i)
{
    close(l->pending[i].fd);
    l->pending[i] = l->pending[--l->npending];
}

/* Take new TCP connections off the backlog (non-blocking). */
static ncclResult_t accept_new(fcn_listen_comm *l)
{
    while (l->npending < FCN_MAX_PENDING) {
        int fd = accept(l->fd, NULL, NULL);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
                return ncclSuccess;
            FCN_WARN("accept: %s", strerror(errno));
            return ncclSystemError;
        }
        if (tune(fd) < 0) {
            FCN_WARN("accept: socket options: %s", strerror(errno));
            close(fd);
            return ncclSystemError;
        }
        l->pending[l->npending].fd = fd;
        l->pending[l->npending].off = 0;
        l->npending++;
    }
    return ncclSuccess;
}

ncclResult_t fcn_accept(void *listen_comm, void **recv_comm)
{
    fcn_listen_comm *l = listen_comm;
    if (!l || !recv_comm || l->magic != FCN_LISTEN_MAGIC) return ncclInvalidArgument;
    *recv_comm = NULL;
    pthread_mutex_lock(&l->lock);
    ncclResult_t rc = accept_new(l);
    for (int i = 0; rc == ncclSuccess && i < l->npending;) {
        typeof(l->pending[0]) *p = &l->pending[i];
        ssize_t k = recv(p->fd, (char *)&p->hello + p->off, sizeof p->hello - p->off, MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            i++;
            continue;
        }
        if (k <= 0) { /* the connector went away before saying hello */
            FCN_INFO("accept: a connection closed before its hello (%s)", k ? strerror(errno) : "EOF");
            drop_pending(l, i);
            continue;
        }
        p->off += (size_t)k;
        if (p->off < sizeof p->hello) continue; /* read the rest now */
        if (p->hello.magic != FCN_HANDLE_MAGIC || p->hello.key != l->key) {
            FCN_WARN("accept: dropping a connection that is not for this listener");
            drop_pending(l, i);
            continue;
        }
        fcn_comm *c = comm_new(FCN_RECV_COMM, p->fd, l->dev);
        if (!c) {
            rc = ncclSystemError;
            break;
        }
        l->pending[i] = l->pending[--l->npending];
        *recv_comm = c;
        FCN_TRACE("accepted a connection on dev %d", l->dev);
        break;
    }
    pthread_mutex_unlock(&l->lock);
    return rc;
}

ncclResult_t fcn_close_listen(void *listen_comm)
{
    fcn_listen_comm *l = listen_comm;
    if (!l) return ncclSuccess;
    if (l->magic != FCN_LISTEN_MAGIC) return ncclInvalidArgument;
    while (l->npending) drop_pending(l, 0);
    close(l->fd);
    pthread_mutex_destroy(&l->lock);
    l->magic = 0;
    free(l);
    return ncclSuccess;
}

ncclResult_t fcn_close_comm(void *comm)
{
    fcn_comm *c = comm;
    if (!c) return ncclSuccess;
    if (c->magic != FCN_COMM_MAGIC) return ncclInvalidArgument;
    FCN_TRACE("close %s comm after %llu messages", c->kind == FCN_SEND_COMM ? "send" : "recv",
              (unsigned long long)c->nmsgs);
    comm_free(c);
    return ncclSuccess;
}
