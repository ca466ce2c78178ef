/* One poll() per pass over a thread's receive connections (net_ready.h).
 *
 * NCCL's proxy tests each of its connections once per pass, some 30 at a
 * time: what a test asks of this file is looked up by the connection in a
 * small table (no scan of the pass), and a thread's state is reached
 * through one pointer (a dynamic library's thread-local variables each cost
 * a call to find). */
#include "net_ready.h"

#include <poll.h>
#include <stdint.h>
#include <stdlib.h>

/* Connections one pass can hold; a pass over more reads the others as before. */
#define PASS_MAX 64
#define SLOTS 256 /* a power of two, well above PASS_MAX: probes stay short */

typedef struct {
    const void *comm;
    uint64_t tested; /* the pass that tested it last */
    uint64_t polled; /* the pass whose poll gave `readable` */
    int fd;          /* the descriptor that poll looked at */
    short readable;  /* poll's revents then */
} entry;

typedef struct {
    uint64_t pass; /* the pass under way, from 1 */
    int n;         /* connections it tested */
    entry *tested[PASS_MAX];
    entry slots[SLOTS];
} thread_state;

static __thread thread_state *state __attribute__((tls_model("initial-exec")));

/* An entry no pass under way or just polled needs. */
static bool stale(const thread_state *s, const entry *e)
{
    return e->tested + 1 < s->pass && e->polled + 1 < s->pass;
}

/* comm's entry, made in the first free or stale slot of its probe path
 * when it has none; NULL when the table has no room (then it is read). */
static entry *entry_of(thread_state *s, const void *comm)
{
    uintptr_t h = ((uintptr_t)comm * 0x9e3779b97f4a7c15ull) >> 56;
    entry *reuse = NULL;
    for (unsigned i = 0; i < SLOTS; i++) {
        entry *e = &s->slots[(h + i) & (SLOTS - 1)];
        if (e->comm == comm) return e;
        if (!reuse && (!e->comm || stale(s, e))) reuse = e;
        if (!e->comm) break; /* the end of the path: comm is not in the table */
    }
    if (reuse) *reuse = (entry){.comm = comm};
    return reuse;
}

static void end_pass(thread_state *s)
{
    struct pollfd fds[PASS_MAX];
    for (int i = 0; i < s->n; i++) fds[i] = (struct pollfd){.fd = s->tested[i]->fd, .events = POLLIN};
    if (poll(fds, (nfds_t)s->n, 0) >= 0) /* else no verdicts: read them all */
        for (int i = 0; i < s->n; i++) {
            s->tested[i]->polled = s->pass;
            s->tested[i]->readable = fds[i].revents;
        }
    s->pass++;
    s->n = 0;
}

bool fcn_ready_may_read(const void *comm, int fd)
{
    thread_state *s = state;
    if (!s) {
        if (!(s = state = calloc(1, sizeof *s))) return true;
        s->pass = 2; /* entries start at pass 0: already old */
    }
    entry *e = entry_of(s, comm);
    if (!e) return true;
    if (e->tested == s->pass) end_pass(s); /* tested again: a new pass */
    /* the previous pass's verdict, if it polled this connection's descriptor */
    bool verdict = e->polled + 1 == s->pass && e->fd == fd;
    bool may = !verdict || e->readable != 0; /* data, or an error or hang-up the read reports */
    e->fd = fd;
    if (s->n < PASS_MAX) {
        e->tested = s->pass;
        s->tested[s->n++] = e;
    }
    return may;
}
