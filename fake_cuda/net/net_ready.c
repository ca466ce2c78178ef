/* One poll() per pass over a thread's receive connections (net_ready.h). */
#include "net_ready.h"

#include <poll.h>
#include <stddef.h>

/* Connections one pass can hold; a pass over more reads the others as before. */
#define PASS_MAX 64

typedef struct {
    int n;
    const void *comm[PASS_MAX];
    struct pollfd fds[PASS_MAX];
} conn_set;

static __thread conn_set pass;   /* tested in the pass under way */
static __thread conn_set polled; /* the previous pass's, with what its poll found */

static int find(const conn_set *s, const void *comm)
{
    for (int i = 0; i < s->n; i++)
        if (s->comm[i] == comm) return i;
    return -1;
}

static void end_pass(void)
{
    polled = pass;
    if (poll(polled.fds, (nfds_t)polled.n, 0) < 0) polled.n = 0; /* no verdicts: read them all */
    pass.n = 0;
}

bool fcn_ready_may_read(const void *comm, int fd)
{
    if (find(&pass, comm) >= 0) end_pass(); /* tested again: a new pass */
    if (pass.n < PASS_MAX) {
        pass.comm[pass.n] = comm;
        pass.fds[pass.n++] = (struct pollfd){.fd = fd, .events = POLLIN};
    }
    int i = find(&polled, comm);
    /* data, or an error or hang-up the read reports */
    return i < 0 || polled.fds[i].fd != fd || polled.fds[i].revents != 0;
}
