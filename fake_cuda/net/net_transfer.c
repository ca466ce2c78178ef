/* Messages over a connected comm: memory registration, isend/irecv/iflush
 * and test, which progresses the comm.
 *
 * Wire format: per message a fcn_frame {magic, tag, size, arrive, wire,
 * form} then `wire` bytes: the message, without payload its packed
 * non-zero words (net_sparse.h), or a reference to it in the sender's
 * memory (net_comm.h), acknowledged with one byte the other way.
 * A send comm transmits its posted sends in posting order. A recv comm reads
 * a frame header only while a receive is posted, then gives the message to
 * the oldest posted receive with the same tag (NCCL posts receives in the
 * order the peer sends, so in practice the oldest); a message larger than
 * that receive is an error, a smaller one completes it with its real size.
 * A message no posted receive matches stays in the socket until one is
 * posted, which is TCP's own back-pressure. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "idle.h"
#include "log.h"
#include "net_comm.h"
#include "net_core.h"
#include "net_memory.h"
#include "net_ready.h"
#include "net_sparse.h"
#include "payload.h"
#include "net_time.h"
#include "stream_store.h"

#define FCN_MR_MAGIC 0x6e736d72u

typedef struct fcn_mr {
    uint32_t magic;
    int type;
    void *data;
    size_t size;
} fcn_mr;

/* Registration only records the range: every byte is reachable by the
 * process, so there is nothing to pin. */
ncclResult_t fcn_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    (void)comm;
    if (!mhandle) return ncclInvalidArgument;
    if (!(type & (NCCL_PTR_HOST | NCCL_PTR_CUDA))) {
        FCN_WARN("regMr: unsupported memory type %#x", type);
        return ncclInvalidArgument;
    }
    fcn_mr *mr = malloc(sizeof *mr);
    if (!mr) return ncclSystemError;
    *mr = (fcn_mr){.magic = FCN_MR_MAGIC, .type = type, .data = data, .size = size};
    *mhandle = mr;
    return ncclSuccess;
}

ncclResult_t fcn_dereg_mr(void *comm, void *mhandle)
{
    (void)comm;
    fcn_mr *mr = mhandle;
    if (!mr) return ncclSuccess;
    if (mr->magic != FCN_MR_MAGIC) {
        FCN_WARN("deregMr: %p is not a registration of this plugin", mhandle);
        return ncclInvalidArgument;
    }
    mr->magic = 0;
    free(mr);
    return ncclSuccess;
}

static int would_block(void)
{
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

/* Mark the comm failed; every later call on it reports `rc`. */
static ncclResult_t fail(fcn_comm *c, ncclResult_t rc, const char *what, int err)
{
    if (c->error == ncclSuccess)
        FCN_WARN("%s comm %p: %s%s%s (%d requests pending)",
                 c->kind == FCN_SEND_COMM ? "send" : "recv", (void *)c, what, err ? ": " : "",
                 err ? strerror(err) : "", c->nqueued);
    c->error = rc;
    return rc;
}

static ncclResult_t socket_error(fcn_comm *c, const char *what, int err)
{
    int remote = err == EPIPE || err == ECONNRESET || err == ETIMEDOUT;
    return fail(c, remote ? ncclRemoteError : ncclSystemError, what, err);
}

static void dequeue(fcn_comm *c, int pos)
{
    memmove(&c->queue[pos], &c->queue[pos + 1], (size_t)(c->nqueued - pos - 1) * sizeof c->queue[0]);
    c->nqueued--;
}

static void complete(fcn_comm *c, int pos, size_t nbytes)
{
    fcn_request *r = &c->req[c->queue[pos]];
    r->nbytes = nbytes;
    r->done = 1;
    dequeue(c, pos);
    c->nmsgs++;
}

/* The message on the wire is all there (sent or received). */
static void wire_done(fcn_comm *c)
{
    c->wire_req = -1;
    c->wire_off = 0;
}

/* The send at queue position pos is over: its buffer is NCCL's again. */
static void send_done(fcn_comm *c, int pos)
{
    fcn_request *r = &c->req[c->queue[pos]];
    fcn_time_sent(r->data, r->sent);
    complete(c, pos, r->size);
    fc_nudge_gpus(); /* NCCL's proxy returns the credit: a GPU may wait for it */
}

#define FCN_ACK 'a'

/* Sends that went as references complete as their acknowledgements
 * arrive, oldest first (the receiver takes messages in order). */
static ncclResult_t take_acks(fcn_comm *c)
{
    if (!c->nsent || !fcn_ready_may_read(c, c->fd)) return ncclSuccess;
    char acks[FCN_MAX_REQUESTS];
    ssize_t k = recv(c->fd, acks, (size_t)c->nsent, MSG_DONTWAIT);
    if (k < 0 && would_block()) return ncclSuccess;
    if (k < 0) return socket_error(c, "receive", errno);
    if (k == 0) return fail(c, ncclRemoteError, "the peer closed the connection", 0);
    for (ssize_t i = 0; i < k; i++) {
        if (acks[i] != FCN_ACK) return fail(c, ncclInternalError, "corrupt acknowledgement", 0);
        c->nsent--;
        c->nrefs++;
        send_done(c, 0);
    }
    return ncclSuccess;
}

static ncclResult_t give_acks(fcn_comm *c)
{
    char acks[FCN_MAX_REQUESTS];
    memset(acks, FCN_ACK, sizeof acks);
    while (c->acks_owed) {
        size_t n = c->acks_owed < sizeof acks ? c->acks_owed : sizeof acks;
        ssize_t k = send(c->fd, acks, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && would_block()) return ncclSuccess;
        if (k < 0) return socket_error(c, "send", errno);
        c->acks_owed -= (unsigned)k;
    }
    return ncclSuccess;
}

/* A message landed in `data`: a GPU reading it as LL or LL128 lines waits on
 * the flag of its last line (prims.c), the last 32 bits of an LL line, the
 * last 64 of an LL128 line; one waiting for the step's tail is woken by the
 * announcement (NCCL's proxy writes the tail next). */
static void wake_readers(char *data, size_t size)
{
    uintptr_t end = (uintptr_t)data + size;
    if (size >= 8 && end % 8 == 0) {
        fc_wake_word((void *)(end - 4), fcn_memory_key((void *)(end - 4)), false);
        fc_wake_word((void *)(end - 8), fcn_memory_key((void *)(end - 8)), false);
    }
    fc_nudge_gpus();
}

/* The frame of the send queued at idx, and what follows it. */
static ncclResult_t start_send(fcn_comm *c, int idx)
{
    fcn_request *r = &c->req[idx];
    c->wire_req = idx;
    c->wire_off = 0;
    c->frame = (fcn_frame){.magic = FCN_FRAME_MAGIC, .tag = r->tag, .size = r->size, .arrive = r->arrive,
                           .wire = r->size, .form = FCN_WIRE_BYTES};
    c->wire_data = r->data;
    if (fc_no_payload()) {
        size_t len = fcn_sparse_pack(r->data, r->size, &c->packed, &c->packed_cap);
        if (len == (size_t)-1) return fail(c, ncclSystemError, "out of memory", 0);
        c->frame.wire = len;
        c->frame.form = FCN_WIRE_PACKED;
        c->wire_data = c->packed;
    } else if (c->by_ref && r->size >= FCN_REF_MIN_BYTES && fcn_memory_ref(r->data, r->size, &c->ref)) {
        c->frame.wire = sizeof c->ref;
        c->frame.form = FCN_WIRE_REF;
        c->wire_data = (const char *)&c->ref;
    }
    return ncclSuccess;
}

static ncclResult_t progress_send(fcn_comm *c)
{
    ncclResult_t rc = take_acks(c);
    if (rc != ncclSuccess) return rc;
    while (c->nqueued > c->nsent) {
        int idx = c->queue[c->nsent];
        if (c->wire_req != idx && (rc = start_send(c, idx)) != ncclSuccess) return rc;
        size_t total = sizeof c->frame + c->frame.wire;
        while (c->wire_off < total) {
            struct iovec iov[2];
            int n = 0;
            if (c->wire_off < sizeof c->frame)
                iov[n++] = (struct iovec){(char *)&c->frame + c->wire_off, sizeof c->frame - c->wire_off};
            size_t done = c->wire_off > sizeof c->frame ? c->wire_off - sizeof c->frame : 0;
            if (done < c->frame.wire) iov[n++] = (struct iovec){(char *)c->wire_data + done, c->frame.wire - done};
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
            ssize_t k = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k < 0 && would_block()) return ncclSuccess;
            if (k < 0) return socket_error(c, "send", errno);
            c->wire_off += (size_t)k;
        }
        wire_done(c);
        if (c->frame.form == FCN_WIRE_REF) c->nsent++; /* done at its acknowledgement */
        else send_done(c, c->nsent);
    }
    return ncclSuccess;
}

/* The oldest posted receive for `tag`, as a position in the queue, or -1. */
static int match(const fcn_comm *c, int tag)
{
    for (int i = 0; i < c->nqueued; i++)
        if (c->req[c->queue[i]].tag == tag) return i;
    return -1;
}

/* A message sent as a reference: its bytes copied from the sender's memory
 * into the receive's, and an acknowledgement owed. A copy this large is
 * read next by the GPU (another thread): it bypasses this one's cache. */
static ncclResult_t take_ref(fcn_comm *c, char *into, size_t size)
{
    void *hold;
    const void *at = fcn_memory_open(&c->ref, size, &hold);
    if (!at) {
        FCN_WARN("cannot read a %zu-byte message in the memory of process %d, its sender", size, (int)c->ref.pid);
        return fail(c, ncclSystemError, "a message's bytes cannot be read", 0);
    }
    fc_copy_for_reader(into, at, size, size >= FC_STREAM_MIN_BYTES);
    fc_stream_fence();
    fcn_memory_release(hold);
    c->acks_owed++;
    c->nrefs++;
    return ncclSuccess;
}

static ncclResult_t progress_recv(fcn_comm *c)
{
    bool asked = false; /* the pass's verdict, once per call: after a message, read on */
    while (c->nqueued > 0) {
        if (c->rx_state == FCN_RX_HEADER) {
            if (c->wire_off == 0 && !asked) {
                asked = true;
                if (!fcn_ready_may_read(c, c->fd)) return ncclSuccess; /* nothing this pass */
            }
            while (c->wire_off < sizeof c->frame) {
                ssize_t k = recv(c->fd, (char *)&c->frame + c->wire_off, sizeof c->frame - c->wire_off,
                                 MSG_DONTWAIT);
                if (k < 0 && would_block()) return ncclSuccess;
                if (k < 0) return socket_error(c, "receive", errno);
                if (k == 0) return fail(c, ncclRemoteError, "the peer closed the connection", 0);
                c->wire_off += (size_t)k;
            }
            bool fits = c->frame.form == FCN_WIRE_BYTES    ? c->frame.wire == c->frame.size
                        : c->frame.form == FCN_WIRE_REF    ? c->frame.wire == sizeof c->ref
                                                           : c->frame.form == FCN_WIRE_PACKED;
            if (c->frame.magic != FCN_FRAME_MAGIC || !fits)
                return fail(c, ncclInternalError, "corrupt message header", 0);
            c->rx_state = FCN_RX_MATCH;
        }
        if (c->rx_state == FCN_RX_MATCH) {
            int pos = match(c, c->frame.tag);
            if (pos < 0) return ncclSuccess; /* wait for a receive with this tag */
            fcn_request *r = &c->req[c->queue[pos]];
            if (c->frame.size > r->size) {
                FCN_WARN("message truncated: %llu bytes with tag %d for a %zu-byte receive",
                         (unsigned long long)c->frame.size, c->frame.tag, r->size);
                return fail(c, ncclInvalidUsage, "message larger than the receive buffer", 0);
            }
            /* The request keeps its queue slot; move it to the front so the
             * payload loop below finds it at position 0. */
            int idx = c->queue[pos];
            memmove(&c->queue[1], &c->queue[0], (size_t)pos * sizeof c->queue[0]);
            c->queue[0] = idx;
            c->wire_req = idx;
            c->rx_state = FCN_RX_PAYLOAD;
        }
        fcn_request *r = &c->req[c->wire_req];
        size_t total = sizeof c->frame + c->frame.wire;
        char *into = r->data;
        if (c->frame.form == FCN_WIRE_PACKED) { /* the runs first, then into the buffer */
            if (!fcn_sparse_room(&c->packed, &c->packed_cap, c->frame.wire))
                return fail(c, ncclSystemError, "out of memory", 0);
            into = c->packed;
        } else if (c->frame.form == FCN_WIRE_REF) {
            into = (char *)&c->ref;
        }
        while (c->wire_off < total) {
            size_t done = c->wire_off - sizeof c->frame;
            ssize_t k = recv(c->fd, into + done, total - c->wire_off, MSG_DONTWAIT);
            if (k < 0 && would_block()) return ncclSuccess;
            if (k < 0) return socket_error(c, "receive", errno);
            if (k == 0) return fail(c, ncclRemoteError, "the peer closed the connection mid-message", 0);
            c->wire_off += (size_t)k;
        }
        if (c->frame.form == FCN_WIRE_PACKED && !fcn_sparse_unpack(c->packed, c->frame.wire, r->data, c->frame.size))
            return fail(c, ncclInternalError, "corrupt message without payload", 0);
        if (c->frame.form == FCN_WIRE_REF) {
            ncclResult_t rc = take_ref(c, r->data, c->frame.size);
            if (rc != ncclSuccess) return rc;
        }
        fcn_time_received(r->data, c->frame.arrive);
        r->arrive = c->frame.arrive;
        complete(c, 0, c->frame.size);
        wire_done(c);
        wake_readers(r->data, c->frame.size);
        c->rx_state = FCN_RX_HEADER;
    }
    return ncclSuccess;
}

static ncclResult_t progress(fcn_comm *c)
{
    if (c->error != ncclSuccess) return c->error;
    ncclResult_t rc = c->kind == FCN_SEND_COMM ? progress_send(c) : progress_recv(c);
    if (rc == ncclSuccess && c->acks_owed) rc = give_acks(c);
    /* What a sleeping proxy must wake for: room to send (a message, an
     * acknowledgement), data to receive (a message, an acknowledgement). */
    short want = 0;
    if (rc == ncclSuccess && c->kind == FCN_SEND_COMM)
        want = (short)((c->nqueued > c->nsent ? POLLOUT : 0) | (c->nsent ? POLLIN : 0));
    else if (rc == ncclSuccess)
        want = (short)((c->nqueued ? POLLIN : 0) | (c->acks_owed ? POLLOUT : 0));
    if (want != c->watched) {
        fc_watch_fd(c->fd, want);
        c->watched = want;
    }
    return rc;
}

/* A free request slot, or NULL when all are in use ("try again"). */
static fcn_request *req_alloc(fcn_comm *c, int kind)
{
    for (int i = 0; i < FCN_MAX_REQUESTS; i++) {
        fcn_request *r = &c->req[i];
        if (r->kind == FCN_REQ_FREE) {
            *r = (fcn_request){.comm = c, .kind = kind};
            return r;
        }
    }
    return NULL;
}

static fcn_comm *checked(void *comm, int kind)
{
    fcn_comm *c = comm;
    return c && c->magic == FCN_COMM_MAGIC && c->kind == kind ? c : NULL;
}

/* Queue a send/recv and start moving it at once (a small message usually
 * leaves before isend returns). */
static ncclResult_t post(fcn_comm *c, int kind, void *data, size_t size, int tag, const uint64_t *arrive,
                         void **request)
{
    pthread_mutex_lock(&c->lock);
    ncclResult_t rc = c->error;
    fcn_request *r = rc == ncclSuccess ? req_alloc(c, kind) : NULL;
    if (r) {
        r->data = data;
        r->size = size;
        r->tag = tag;
        if (kind == FCN_REQ_SEND && arrive) r->arrive = *arrive; /* timed by the caller */
        else if (kind == FCN_REQ_SEND) fcn_time_send(c->dev, data, size, &r->arrive, &r->sent);
        c->queue[c->nqueued++] = (int)(r - c->req);
        rc = progress(c);
        if (rc != ncclSuccess) r->kind = FCN_REQ_FREE; /* the caller gets the error, not r */
    }
    pthread_mutex_unlock(&c->lock);
    *request = rc == ncclSuccess ? r : NULL;
    if (rc == ncclSuccess && r && fc_log_level() >= FC_LOG_DEBUG)
        fc_log(FC_LOG_DEBUG, "net: %s %zu bytes tag %d on comm %p -> request %p",
               kind == FCN_REQ_SEND ? "isend" : "irecv", size, tag, (void *)c, (void *)r);
    return rc;
}

ncclResult_t fcn_isend(void *send_comm, void *data, size_t size, int tag, void **request)
{
    fcn_comm *c = checked(send_comm, FCN_SEND_COMM);
    if (!c || !request || (size && !data)) return ncclInvalidArgument;
    return post(c, FCN_REQ_SEND, data, size, tag, NULL, request);
}

ncclResult_t fcn_isend_at(void *send_comm, void *data, size_t size, int tag, uint64_t arrive, void **request)
{
    fcn_comm *c = checked(send_comm, FCN_SEND_COMM);
    if (!c || !request || (size && !data)) return ncclInvalidArgument;
    return post(c, FCN_REQ_SEND, data, size, tag, &arrive, request);
}

ncclResult_t fcn_irecv(void *recv_comm, int n, void **data, const size_t *sizes, const int *tags,
                       void **request)
{
    fcn_comm *c = checked(recv_comm, FCN_RECV_COMM);
    if (!c || !request || !data || !sizes || !tags) return ncclInvalidArgument;
    if (n != 1) {
        FCN_WARN("irecv: %d grouped receives, but the plugin reports maxRecvs %d", n, FCN_MAX_RECVS);
        return ncclInvalidUsage;
    }
    return post(c, FCN_REQ_RECV, data[0], sizes[0], tags[0], NULL, request);
}

/* Received bytes are in ordinary memory once recv() returned: nothing to
 * flush. A non-empty flush still gets a request, completed at once, so that
 * NCCL sees the usual flush round trip; an empty one gets NULL ("done"). */
ncclResult_t fcn_iflush(void *recv_comm, int n, void **data, const int *sizes, void **request)
{
    (void)data;
    fcn_comm *c = checked(recv_comm, FCN_RECV_COMM);
    if (!c || !request) return ncclInvalidArgument;
    *request = NULL;
    int any = 0;
    for (int i = 0; sizes && i < n; i++) any |= sizes[i] > 0;
    if (!any) return ncclSuccess;
    pthread_mutex_lock(&c->lock);
    fcn_request *r = req_alloc(c, FCN_REQ_FLUSH);
    if (r) r->done = 1;
    pthread_mutex_unlock(&c->lock);
    *request = r; /* NULL when full: NCCL takes that as complete too */
    return ncclSuccess;
}

ncclResult_t fcn_test(void *request, int *done, int *sizes) { return fcn_test_at(request, done, sizes, NULL); }

ncclResult_t fcn_test_at(void *request, int *done, int *sizes, uint64_t *arrive)
{
    fcn_request *r = request;
    if (!r || !done) return ncclInvalidArgument;
    fcn_comm *c = r->comm;
    if (!c || c->magic != FCN_COMM_MAGIC || r->kind == FCN_REQ_FREE) {
        FCN_WARN("test: %p is not a pending request", request);
        return ncclInvalidArgument;
    }
    pthread_mutex_lock(&c->lock);
    ncclResult_t rc = r->done ? ncclSuccess : progress(c);
    *done = rc == ncclSuccess && r->done;
    if (*done) {
        if (sizes) sizes[0] = r->nbytes > (size_t)INT32_MAX ? INT32_MAX : (int)r->nbytes;
        if (arrive) *arrive = r->arrive;
        r->kind = FCN_REQ_FREE;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}
