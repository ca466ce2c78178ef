/* listen / connect / accept over TCP (net_address.c picks the interface), all non-blocking in NCCL's
 * sense: connect and accept answer ncclSuccess with a NULL comm until the
 * connection is ready, and NCCL calls again.
 *
 * The handle carries the address of the listening socket (shared with other
 * listen comms: net_listener.c) and the listen comm's random key. connect()
 * keeps its progress in the handle itself (NCCL passes the same handle
 * buffer on every retry, as its own socket plugin relies on); the connector
 * then sends a hello {magic, key} so that accept() only hands out
 * connections meant for this listen comm. The handle also says which
 * processes can follow the listener's references to memory
 * (fcn_memory_reach): a connector among them sends large messages as
 * references (net_comm.h), and connects through the listener's Unix socket
 * (net_listener.c) when it has one. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "idle.h"
#include "net_comm.h"
#include "net_core.h"
#include "net_listener.h"
#include "net_memory.h"

#define FCN_LISTEN_MAGIC 0x6e736c6eu

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
    uint64_t reach;          /* the listener's fcn_memory_reach */
    int32_t dev;
    int32_t reserved;
    fcn_connecting *pending; /* connect()'s progress; NULL as listen() writes it */
    char local[FCN_LOCAL_NAME_MAX]; /* the listener's Unix socket; "": none */
} fcn_handle;
_Static_assert(sizeof(fcn_handle) <= NCCL_NET_HANDLE_MAXSIZE, "handle exceeds NCCL's 128 bytes");

typedef struct fcn_listen_comm {
    uint32_t magic;
    int dev;
    uint64_t key;
    fcn_listener *socket;
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

static fcn_comm *comm_new(int kind, int fd, int dev)
{
    fcn_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->magic = FCN_COMM_MAGIC;
    c->kind = kind;
    c->fd = fd;
    c->dev = dev;
    int domain = 0;
    socklen_t len = sizeof domain;
    c->local = getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX;
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
    fcn_listen_comm *l = calloc(1, sizeof *l);
    if (!l) return ncclSystemError;
    struct sockaddr_in a;
    char local[FCN_LOCAL_NAME_MAX];
    l->magic = FCN_LISTEN_MAGIC;
    l->dev = dev;
    l->key = random_key();
    if (!(l->socket = fcn_listener_join(dev, l->key, &a, local))) {
        free(l);
        return ncclSystemError;
    }
    memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE); /* NCCL may hand in uninitialised memory */
    fcn_handle *h = handle;
    h->magic = FCN_HANDLE_MAGIC;
    h->key = l->key;
    h->addr = a;
    h->reach = fcn_memory_reach();
    h->dev = dev;
    memcpy(h->local, local, sizeof h->local);
    *listen_comm = l;
    FCN_TRACE("listen dev %d on %s:%d", dev, fcn_address_text(a.sin_addr).s, ntohs(a.sin_port));
    return ncclSuccess;
}

static ncclResult_t connect_fail(fcn_handle *h, const char *what, int err)
{
    FCN_WARN("connect to %s:%d: %s: %s", fcn_address_text(h->addr.sin_addr).s, ntohs(h->addr.sin_port), what,
             strerror(err));
    if (h->pending) {
        comm_free(h->pending->comm);
        free(h->pending);
        h->pending = NULL;
    }
    return err == ECONNREFUSED || err == ECONNRESET || err == EPIPE ? ncclRemoteError
                                                                    : ncclSystemError;
}

/* A socket connecting to h's listener, or -1 with errno; *connected when
 * the connection is made already. `local`: through its Unix socket, or TCP
 * when that fails (a connector in another network namespace, say). */
static int start_connect(const fcn_handle *h, bool local, int *connected)
{
    *connected = 0;
    if (local) {
        struct sockaddr_un a;
        socklen_t alen = fcn_local_address(h->local, &a);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd >= 0 && fcn_tune_socket(fd, false) == 0 && connect(fd, (struct sockaddr *)&a, alen) == 0) {
            *connected = 1;
            return fd;
        }
        FCN_INFO("connect: the listener's Unix socket: %s; using TCP", strerror(errno));
        if (fd >= 0) close(fd);
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || fcn_tune_socket(fd, true) < 0) {
        int err = errno;
        if (fd >= 0) close(fd);
        errno = err;
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&h->addr, sizeof h->addr) == 0) {
        *connected = 1;
    } else if (errno != EINPROGRESS && errno != EINTR) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
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
        bool same_machine = h->reach && h->reach == fcn_memory_reach();
        int connected;
        int fd = start_connect(h, same_machine && h->local[0], &connected);
        if (fd < 0) return connect_fail(h, "connect", errno);
        fcn_connecting *p = calloc(1, sizeof *p);
        fcn_comm *c = comm_new(FCN_SEND_COMM, fd, dev);
        if (!p || !c) {
            free(p);
            if (c) comm_free(c); else close(fd);
            return ncclSystemError;
        }
        c->by_ref = same_machine;
        p->comm = c;
        p->connected = connected;
        p->hello = (fcn_hello){.magic = FCN_HANDLE_MAGIC, .key = h->key};
        h->pending = p;
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
    FCN_TRACE("connected dev %d to %s:%d", dev, fcn_address_text(h->addr.sin_addr).s, ntohs(h->addr.sin_port));
    return ncclSuccess;
}

ncclResult_t fcn_accept(void *listen_comm, void **recv_comm)
{
    fcn_listen_comm *l = listen_comm;
    if (!l || !recv_comm || l->magic != FCN_LISTEN_MAGIC) return ncclInvalidArgument;
    *recv_comm = NULL;
    int fd;
    ncclResult_t rc = fcn_listener_take(l->socket, l->key, &fd);
    if (fd < 0) return rc;
    fcn_comm *c = comm_new(FCN_RECV_COMM, fd, l->dev);
    if (!c) {
        close(fd);
        return ncclSystemError;
    }
    *recv_comm = c;
    FCN_TRACE("accepted a connection on dev %d", l->dev);
    return ncclSuccess;
}

ncclResult_t fcn_close_listen(void *listen_comm)
{
    fcn_listen_comm *l = listen_comm;
    if (!l) return ncclSuccess;
    if (l->magic != FCN_LISTEN_MAGIC) return ncclInvalidArgument;
    fcn_listener_leave(l->socket, l->key);
    l->magic = 0;
    free(l);
    return ncclSuccess;
}

ncclResult_t fcn_close_comm(void *comm)
{
    fcn_comm *c = comm;
    if (!c) return ncclSuccess;
    if (c->magic != FCN_COMM_MAGIC) return ncclInvalidArgument;
    FCN_TRACE("close %s comm after %llu messages, %llu of them by reference, over %s",
              c->kind == FCN_SEND_COMM ? "send" : "recv", (unsigned long long)c->nmsgs, (unsigned long long)c->nrefs,
              c->local ? "a Unix socket" : "TCP");
    comm_free(c);
    return ncclSuccess;
}
