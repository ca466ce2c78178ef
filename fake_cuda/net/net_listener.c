/* Listening sockets for listen comms. NCCL makes a listen comm per network
 * connection it receives on; a socket each would bind a port each, and a
 * simulated cluster of hundreds of ranks on one machine has more receiving
 * connections than the machine has ephemeral ports (~28,000 by default; 512
 * ranks on dgx-h100 already ran out). So the listen comms one thread (NCCL's
 * proxy service thread of a rank) makes on a device share one socket, and
 * accepted connections are told apart by the key of their hello. Sharing
 * within a thread, not a process, keeps a connection from waiting on a
 * thread that sleeps elsewhere (the host library's sleeps on empty accepts:
 * the thread that accepts it is the one that waits for it).
 *
 * Each listener also listens on a Unix socket (an abstract name, which goes
 * with its last descriptor): a connector on the same machine uses it, as
 * it uses references for large messages (net_connect.c). A small message
 * through a Unix socket is queued to its reader; through TCP on loopback it
 * also runs the protocol's receive path and acknowledgements, which on a
 * machine shared by every rank is several times the cost. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "host_lib.h"
#include "net_core.h"
#include "net_listener.h"

typedef struct fcn_arrival {
    int fd;
    size_t off; /* bytes of the hello read */
    fcn_hello hello;
} fcn_arrival;

struct fcn_listener {
    fcn_listener *next;
    int fd, dev;
    int local_fd; /* the Unix socket; -1: none */
    pthread_t owner;
    struct sockaddr_in addr;
    char local[FCN_LOCAL_NAME_MAX]; /* its abstract name, "" when none */
    uint64_t *keys; /* of the listen comms on it */
    int nkeys, keys_cap;
    fcn_arrival *arrived; /* accepted, hello not yet taken */
    int narrived, arrived_cap;
};

/* Every listener and everything in them. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fcn_listener *listeners;

int fcn_tune_socket(int fd, bool tcp)
{
    int one = 1;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -1;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) return -1;
    return tcp ? setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) : 0;
}

socklen_t fcn_local_address(const char *name, struct sockaddr_un *a)
{
    size_t n = strnlen(name, FCN_LOCAL_NAME_MAX);
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    memcpy(a->sun_path + 1, name, n); /* sun_path[0] = 0: the abstract namespace */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* The Unix socket beside s's TCP one; without it connectors use TCP. */
static void open_local(fcn_listener *s)
{
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, GRND_NONBLOCK) != (ssize_t)sizeof id)
        id = (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)s;
    char name[FCN_LOCAL_NAME_MAX];
    snprintf(name, sizeof name, "ncclsim-net-%016llx", (unsigned long long)id);
    struct sockaddr_un a;
    socklen_t alen = fcn_local_address(name, &a);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || fcn_tune_socket(fd, false) < 0 || bind(fd, (struct sockaddr *)&a, alen) < 0 ||
        listen(fd, SOMAXCONN) < 0) {
        FCN_INFO("listen: no Unix socket beside the TCP one (%s): connections on this machine use TCP",
                 strerror(errno));
        if (fd >= 0) close(fd);
        return;
    }
    s->local_fd = fd;
    memcpy(s->local, name, sizeof name);
}

static int grow(void **items, int *cap, int need, size_t size)
{
    if (need <= *cap) return 0;
    int n = *cap ? *cap * 2 : 16;
    void *p = realloc(*items, (size_t)n * size);
    if (!p) return -1;
    *items = p;
    *cap = n;
    return 0;
}

static fcn_listener *open_listener(int dev)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    const char *ifname;
    if (!fcn_listen_address(&a.sin_addr, &ifname)) {
        FCN_WARN("listen: no up IPv4 interface matches NCCL_SOCKET_IFNAME=%s",
                 getenv("NCCL_SOCKET_IFNAME") ? getenv("NCCL_SOCKET_IFNAME") : "(unset)");
        return NULL;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t alen = sizeof a;
    if (fd < 0 || fcn_tune_socket(fd, true) < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        listen(fd, SOMAXCONN) < 0 || getsockname(fd, (struct sockaddr *)&a, &alen) < 0) {
        int err = errno;
        FCN_WARN("listen: socket on %s (%s) failed: %s", ifname, fcn_address_text(a.sin_addr).s, strerror(err));
        if (fd >= 0) close(fd);
        return NULL;
    }
    fcn_listener *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return NULL;
    }
    s->fd = fd;
    s->dev = dev;
    s->owner = pthread_self();
    s->addr = a;
    s->local_fd = -1;
    open_local(s);
    return s;
}

fcn_listener *fcn_listener_join(int dev, uint64_t key, struct sockaddr_in *addr, char local[FCN_LOCAL_NAME_MAX])
{
    pthread_mutex_lock(&lock);
    fcn_listener *s = listeners;
    while (s && !(s->dev == dev && pthread_equal(s->owner, pthread_self()))) s = s->next;
    if (!s && (s = open_listener(dev))) {
        s->next = listeners;
        listeners = s;
    }
    if (s && grow((void **)&s->keys, &s->keys_cap, s->nkeys + 1, sizeof *s->keys) < 0) {
        pthread_mutex_unlock(&lock);
        return NULL; /* a socket without comms stays for the thread's next listen */
    }
    if (s) {
        s->keys[s->nkeys++] = key;
        *addr = s->addr;
        memcpy(local, s->local, FCN_LOCAL_NAME_MAX);
    }
    pthread_mutex_unlock(&lock);
    return s;
}

static void drop(fcn_listener *s, int i)
{
    close(s->arrived[i].fd);
    s->arrived[i] = s->arrived[--s->narrived];
}

static int has_key(const fcn_listener *s, uint64_t key)
{
    for (int i = 0; i < s->nkeys; i++)
        if (s->keys[i] == key) return 1;
    return 0;
}

/* Take the next connection off the backlog of `lfd`, which poll() found
 * readable (non-blocking: it may have gone). */
static ncclResult_t accept_next(fcn_listener *s, int lfd)
{
    if (grow((void **)&s->arrived, &s->arrived_cap, s->narrived + 1, sizeof *s->arrived) < 0) return ncclSystemError;
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return ncclSuccess;
        FCN_WARN("accept: %s", strerror(errno));
        return ncclSystemError;
    }
    if (fcn_tune_socket(fd, lfd == s->fd) < 0) {
        FCN_WARN("accept: socket options: %s", strerror(errno));
        close(fd);
        return ncclSystemError;
    }
    s->arrived[s->narrived++] = (fcn_arrival){.fd = fd};
    return ncclSuccess;
}

/* NCCL asks for a listen comm's connection in a loop until it is there
 * (16 x 8 with a process per host: 1.1 million asks for 7,856
 * connections). An accept() that finds the backlog empty still makes and
 * frees a socket in the kernel (an inode and a file, freed through RCU);
 * poll() asks without that. The host library is told of each socket found
 * empty (a listening one, or a connection whose hello has not come), as an
 * empty accept() or recv() would have, so that the thread yields or sleeps
 * on it the same way, but after the lock is let go: every listener of the
 * process shares it, and a sleep under it held up the other ranks' service
 * threads (with a process per host NCCL now connects 16 x 8 in half the
 * time, 32 x 8 in a quarter). */
#define EMPTY_MAX 6 /* the listening sockets and some connections without their hello */

ncclResult_t fcn_listener_take(fcn_listener *s, uint64_t key, int *fd)
{
    *fd = -1;
    struct pollfd ask[2] = {{.fd = s->fd, .events = POLLIN}, {.fd = s->local_fd, .events = POLLIN}};
    nfds_t nask = s->local_fd >= 0 ? 2 : 1;
    if (poll(ask, nask, 0) < 0) ask[0].revents = ask[1].revents = POLLIN; /* then accept() tells */
    int empty[EMPTY_MAX], nempty = 0;
    for (nfds_t i = 0; i < nask; i++)
        if (!ask[i].revents) empty[nempty++] = ask[i].fd;
    pthread_mutex_lock(&lock);
    ncclResult_t rc = ncclSuccess;
    for (nfds_t i = 0; i < nask && rc == ncclSuccess; i++)
        if (ask[i].revents) rc = accept_next(s, ask[i].fd);
    for (int i = 0; rc == ncclSuccess && i < s->narrived;) {
        fcn_arrival *a = &s->arrived[i];
        if (a->off < sizeof a->hello) {
            /* read(), which the host library leaves alone: no sleep here */
            ssize_t k = read(a->fd, (char *)&a->hello + a->off, sizeof a->hello - a->off);
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
                if (nempty < EMPTY_MAX) empty[nempty++] = a->fd;
                i++;
                continue;
            }
            if (k <= 0) { /* the connector went away before saying hello */
                FCN_INFO("accept: a connection closed before its hello (%s)", k ? strerror(errno) : "EOF");
                drop(s, i);
                continue;
            }
            a->off += (size_t)k;
            if (a->off < sizeof a->hello) continue; /* read the rest now */
            if (a->hello.magic != FCN_HANDLE_MAGIC || !has_key(s, a->hello.key)) {
                FCN_WARN("accept: dropping a connection that is for no listen comm here");
                drop(s, i);
                continue;
            }
        }
        if (a->hello.key != key) { /* another comm's: it takes it */
            i++;
            continue;
        }
        *fd = a->fd;
        s->arrived[i] = s->arrived[--s->narrived];
        break;
    }
    pthread_mutex_unlock(&lock);
    if (*fd < 0 && rc == ncclSuccess && ncclsim_found_empty)
        for (int i = 0; i < nempty; i++) ncclsim_found_empty(empty[i]);
    return rc;
}

void fcn_listener_leave(fcn_listener *s, uint64_t key)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < s->narrived;) {
        if (s->arrived[i].off == sizeof s->arrived[i].hello && s->arrived[i].hello.key == key)
            drop(s, i);
        else
            i++;
    }
    for (int i = 0; i < s->nkeys; i++)
        if (s->keys[i] == key) {
            s->keys[i] = s->keys[--s->nkeys];
            break;
        }
    if (s->nkeys == 0) {
        while (s->narrived) drop(s, 0);
        fcn_listener **p = &listeners;
        while (*p != s) p = &(*p)->next;
        *p = s->next;
        close(s->fd);
        if (s->local_fd >= 0) close(s->local_fd);
        free(s->keys);
        free(s->arrived);
        free(s);
    }
    pthread_mutex_unlock(&lock);
}
