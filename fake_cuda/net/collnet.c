/* CollNet: in-network reduction (as SHARP switches do for InfiniBand), offered
 * when the host's platform says its fabric has it ([platform] collnet = 1).
 *
 * NCCL makes one collective group per CollNet device and communicator, of
 * one rank per host (the heads), and hands it buffers to reduce (AllReduce),
 * or windows of the vector of every member's part to gather or to reduce and
 * scatter (AllGather, ReduceScatter). The "switch" here is the group itself:
 * every member sends its data to every other over the plugin's own TCP
 * connections (net_connect.c, net_transfer.c) and reduces what arrives, all
 * in member order, so every member computes the same bits, as a switch's
 * single reduction gives every member the same result. The reductions are
 * NCCL's own operators (device/reduce.c).
 *
 * Modelled time (net_time.h) is the switch's, not these messages': each
 * member's NIC sends its data up once, from when it is ready; its messages
 * tell the others when its last byte reached the switch, and the result is
 * back when the last member's is, plus the way down (fcn_time_reduced). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collnet.h"
#include "net_comm.h"
#include "net_core.h"
#include "net_time.h"
#include "payload.h"
#include "platform.h"
#include "reduce.h"

#define COLL_MAGIC 0x636f6c6cu /* "coll" */
#define COLL_REQ_MAGIC 0x63726571u
#define COLL_MAX_RANKS 1024
#define COLL_TAG 0x636e /* tags of the group's own messages */

typedef struct coll_comm {
    uint32_t magic;
    int rank, nranks;
    int dev;             /* this member's NIC (its listener's) */
    void **send, **recv; /* connections to and from every other member, by rank */
    uint64_t ops;        /* operations posted, for logs */
} coll_comm;

/* What a request does once every message has arrived. */
typedef enum { COLL_ALLREDUCE, COLL_ALLGATHER, COLL_REDUCESCATTER } coll_kind;

typedef struct coll_request {
    uint32_t magic;
    coll_comm *c;
    coll_kind kind;
    const void *send; /* AllReduce, ReduceScatter: this member's data for the reduction */
    void *recv;
    size_t count, bytes; /* elements and bytes this member reduces (AllGather: bytes of the window) */
    fc_redop op;
    char *gathered; /* the other members' data to reduce, by rank (this member's slot unused) */
    void **reqs;    /* this member's sends, then its receives; NULL once complete */
    int nreqs, pending;
    /* modelled time: this member's way up (its NIC's start and end), the
     * latest end of any member's seen so far, the bytes that come back */
    const void *upload;
    uint64_t up_start, up_end, last_end;
    size_t down;
} coll_request;

static bool offered(void)
{
    const fc_platform *p = fc_platform_get();
    return p && p->collnet && p->nnics > 0;
}

ncclResult_t fcn_collnet_devices(int *ndev)
{
    if (!ndev) return ncclInvalidArgument;
    if (!offered()) {
        *ndev = 0;
        return ncclSuccess;
    }
    return fcn_devices(ndev); /* every NIC: NCCL merges CollNet and net devices by name */
}

/* What SHARP switches reduce, as its NCCL plugin (nccl-rdma-sharp-plugins)
 * declares: sum, max and min (ncclRedOp_t 0, 2, 3; no product), on 8- to
 * 64-bit integers, half, float, double and bfloat16 (ncclDataType_t 0..9,
 * the 8-bit and bfloat16 types with SHARP v3 switches; no fp8). */
static bool switch_reduces(int type, int op) { return (op == 0 || op == 2 || op == 3) && type >= 0 && type <= 9; }

ncclResult_t fcn_collnet_reduce_support(int type, int op, int *supported)
{
    if (!supported) return ncclInvalidArgument;
    *supported = switch_reduces(type, op);
    return ncclSuccess;
}

static void sleep_ms(void)
{
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
}

/* Post a message and wait until the plugin took it (a full comm answers
 * NULL). A message arrives when its sender's data reached the switch. */
static ncclResult_t post(void *comm, bool send, void *data, size_t size, uint64_t arrive, void **req)
{
    int tag = COLL_TAG;
    for (;;) {
        ncclResult_t rc = send ? fcn_isend_at(comm, data, size, tag, arrive, req)
                               : fcn_irecv(comm, 1, &data, &size, &tag, req);
        if (rc != ncclSuccess || *req) return rc;
        sleep_ms();
    }
}

static ncclResult_t wait(void *req)
{
    int done = 0;
    while (!done) {
        ncclResult_t rc = fcn_test(req, &done, NULL);
        if (rc != ncclSuccess) return rc;
        if (!done) sleep_ms();
    }
    return ncclSuccess;
}

static void comm_close(coll_comm *c)
{
    for (int r = 0; r < c->nranks; r++) {
        if (c->send && c->send[r]) fcn_close_comm(c->send[r]);
        if (c->recv && c->recv[r]) fcn_close_comm(c->recv[r]);
    }
    free(c->send);
    free(c->recv);
    c->magic = 0;
    free(c);
}

/* Every member connects to every other and says who it is; accepted
 * connections are sorted by the rank they announce. Blocks until the group
 * is complete, as NCCL expects of a CollNet connect. */
ncclResult_t fcn_collnet_connect(void *handles[], int nranks, int rank, void *listen_comm, void **coll)
{
    if (!handles || !coll || nranks < 1 || nranks > COLL_MAX_RANKS || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    coll_comm *c = calloc(1, sizeof *c);
    if (!c || !(c->send = calloc((size_t)nranks, sizeof(void *))) || !(c->recv = calloc((size_t)nranks, sizeof(void *)))) {
        if (c) comm_close(c);
        return ncclSystemError;
    }
    c->magic = COLL_MAGIC;
    c->rank = rank;
    c->nranks = nranks;
    ncclResult_t rc = ncclSuccess;
    int32_t me = rank, announced[COLL_MAX_RANKS];
    void *hello[COLL_MAX_RANKS] = {0};
    void *accepted[COLL_MAX_RANKS] = {0};
    int nsent = 0, naccepted = 0;
    while (rc == ncclSuccess && (nsent < nranks - 1 || naccepted < nranks - 1)) {
        bool moved = false;
        for (int r = 0; r < nranks && rc == ncclSuccess; r++) {
            if (r == rank || c->send[r]) continue;
            rc = fcn_connect(0, handles[r], &c->send[r]);
            if (c->send[r]) {
                rc = post(c->send[r], true, &me, sizeof me, 0, &hello[r]);
                nsent++;
                moved = true;
            }
        }
        while (rc == ncclSuccess && naccepted < nranks - 1) {
            void *in = NULL;
            rc = fcn_accept(listen_comm, &in);
            if (!in) break;
            accepted[naccepted] = in;
            rc = post(in, false, &announced[naccepted], sizeof announced[0], 0, &hello[rank]);
            if (rc == ncclSuccess) rc = wait(hello[rank]);
            naccepted++;
            moved = true;
        }
        if (!moved) sleep_ms();
    }
    for (int r = 0; r < nranks && rc == ncclSuccess; r++)
        if (r != rank) rc = wait(hello[r]);
    for (int i = 0; i < naccepted && rc == ncclSuccess; i++) {
        int32_t from = announced[i];
        if (from < 0 || from >= nranks || from == rank || c->recv[from]) {
            FCN_WARN("CollNet connect: member %d announced itself as %d", i, from);
            rc = ncclRemoteError;
        } else {
            c->recv[from] = accepted[i];
            c->dev = ((fcn_comm *)accepted[i])->dev;
            accepted[i] = NULL;
        }
    }
    for (int i = 0; i < naccepted; i++)
        if (accepted[i]) fcn_close_comm(accepted[i]);
    if (rc != ncclSuccess) {
        comm_close(c);
        return rc;
    }
    FCN_INFO("CollNet group of %d: member %d connected", nranks, rank);
    *coll = c;
    return ncclSuccess;
}

ncclResult_t fcn_collnet_close(void *coll)
{
    coll_comm *c = coll;
    if (!c || c->magic != COLL_MAGIC) return ncclInvalidArgument;
    FCN_INFO("CollNet member %d of %d: %llu operations", c->rank, c->nranks, (unsigned long long)c->ops);
    comm_close(c);
    return ncclSuccess;
}

static ncclResult_t request_new(coll_comm *c, coll_kind kind, size_t gathered, coll_request **out)
{
    coll_request *q = calloc(1, sizeof *q);
    if (!q || !(q->reqs = calloc(2 * (size_t)c->nranks, sizeof(void *))) || !(q->gathered = malloc(gathered + 1))) {
        if (q) free(q->reqs);
        free(q);
        return ncclSystemError;
    }
    q->magic = COLL_REQ_MAGIC;
    q->c = c;
    q->kind = kind;
    *out = q;
    return ncclSuccess;
}

static void request_free(coll_request *q)
{
    free(q->gathered);
    free(q->reqs);
    q->magic = 0;
    free(q);
}

/* Post this member's message to r and r's message to this member (empty
 * ones are not sent: both sides know their sizes). */
static ncclResult_t exchange(coll_request *q, int r, const void *out, size_t outBytes, void *in, size_t inBytes)
{
    coll_comm *c = q->c;
    ncclResult_t rc = ncclSuccess;
    if (outBytes) rc = post(c->send[r], true, (void *)out, outBytes, q->up_end, &q->reqs[q->nreqs++]);
    if (rc == ncclSuccess && inBytes) rc = post(c->recv[r], false, in, inBytes, 0, &q->reqs[q->nreqs++]);
    return rc;
}

/* This member's way up to the switch: `up` bytes of `data`; `down` come back. */
static void time_upload(coll_request *q, const void *data, size_t up, size_t down)
{
    q->upload = data;
    fcn_time_upload(q->c->dev, data, up, &q->up_start, &q->up_end);
    q->last_end = q->up_end;
    q->down = down;
}

static ncclResult_t request_start(coll_request *q, ncclResult_t rc, void **request)
{
    if (rc != ncclSuccess) {
        request_free(q); /* messages already posted complete with the connection */
        return rc;
    }
    q->pending = q->nreqs;
    q->c->ops++;
    *request = q;
    return ncclSuccess;
}

/* NCCL hands the user's operator; the reduction is NCCL's device operator for it. */
static bool reduction_of(int type, int op, fc_redop *out)
{
    if (switch_reduces(type, op) && fc_redop_of_host(type, op, out)) return true;
    FCN_WARN("CollNet: no reduction %d on data type %d", op, type);
    return false;
}

ncclResult_t fcn_collnet_iallreduce(void *coll, void *send, void *recv, size_t count, int type, int op,
                                    void **request)
{
    coll_comm *c = coll;
    if (!c || c->magic != COLL_MAGIC || !request) return ncclInvalidArgument;
    fc_redop rop;
    if (!reduction_of(type, op, &rop)) return ncclInvalidArgument;
    size_t bytes = count * fc_nccl_type_size(type);
    coll_request *q;
    ncclResult_t rc = request_new(c, COLL_ALLREDUCE, bytes * (size_t)c->nranks, &q);
    if (rc != ncclSuccess) return rc;
    q->send = send, q->recv = recv, q->count = count, q->bytes = bytes, q->op = rop;
    time_upload(q, send, bytes, bytes);
    for (int r = 0; r < c->nranks && rc == ncclSuccess; r++)
        if (r != c->rank) rc = exchange(q, r, send, bytes, q->gathered + (size_t)r * bytes, bytes);
    return request_start(q, rc, request);
}

/* AllGather and ReduceScatter work on a window of the whole vector, which is
 * every member's bytesPerRank in member order: member r's share of the window
 * [off, off + bytes) is where it meets [r, r + 1) * bytesPerRank. */
typedef struct {
    size_t lo, hi; /* offsets in the window */
} share;

static share share_of(int r, size_t bytesPerRank, size_t off, size_t bytes)
{
    size_t beg = (size_t)r * bytesPerRank, end = beg + bytesPerRank;
    size_t lo = beg > off ? beg : off, hi = end < off + bytes ? end : off + bytes;
    return hi > lo ? (share){lo - off, hi - off} : (share){0, 0};
}

/* Every member gets the window: each member's share from that member (send
 * holds this member's share of it). */
ncclResult_t fcn_collnet_iallgather(void *coll, void *send, void *recv, size_t bytesPerRank, size_t off,
                                    size_t bytes, void **request)
{
    coll_comm *c = coll;
    if (!c || c->magic != COLL_MAGIC || !request || !bytesPerRank) return ncclInvalidArgument;
    coll_request *q;
    ncclResult_t rc = request_new(c, COLL_ALLGATHER, 0, &q);
    if (rc != ncclSuccess) return rc;
    q->recv = recv, q->bytes = bytes;
    share mine = share_of(c->rank, bytesPerRank, off, bytes);
    memmove((char *)recv + mine.lo, send, mine.hi - mine.lo);
    time_upload(q, send, mine.hi - mine.lo, bytes);
    for (int r = 0; r < c->nranks && rc == ncclSuccess; r++) {
        if (r == c->rank) continue;
        share theirs = share_of(r, bytesPerRank, off, bytes);
        rc = exchange(q, r, send, mine.hi - mine.lo, (char *)recv + theirs.lo, theirs.hi - theirs.lo);
    }
    return request_start(q, rc, request);
}

/* Every member gets its share of the window reduced over all members' data
 * (send holds this member's data for the whole window). */
ncclResult_t fcn_collnet_ireducescatter(void *coll, void *send, void *recv, size_t bytesPerRank, size_t off,
                                        size_t bytes, int type, int op, void **request)
{
    coll_comm *c = coll;
    if (!c || c->magic != COLL_MAGIC || !request || !bytesPerRank) return ncclInvalidArgument;
    fc_redop rop;
    if (!reduction_of(type, op, &rop)) return ncclInvalidArgument;
    size_t esz = fc_nccl_type_size(type);
    share mine = share_of(c->rank, bytesPerRank, off, bytes);
    size_t n = mine.hi - mine.lo;
    coll_request *q;
    ncclResult_t rc = request_new(c, COLL_REDUCESCATTER, n * (size_t)c->nranks, &q);
    if (rc != ncclSuccess) return rc;
    q->send = (const char *)send + mine.lo, q->recv = recv, q->count = n / esz, q->bytes = n;
    q->op = rop;
    time_upload(q, send, bytes, n); /* the whole window goes up, this member's share comes back */
    for (int r = 0; r < c->nranks && rc == ncclSuccess; r++) {
        if (r == c->rank) continue;
        share theirs = share_of(r, bytesPerRank, off, bytes);
        rc = exchange(q, r, (const char *)send + theirs.lo, theirs.hi - theirs.lo, q->gathered + (size_t)r * n, n);
    }
    return request_start(q, rc, request);
}

ncclResult_t fcn_collnet_test(void *request, int *done, int *size)
{
    coll_request *q = request;
    if (!q || q->magic != COLL_REQ_MAGIC || !done) return ncclInvalidArgument;
    for (int i = 0; i < q->nreqs; i++) {
        if (!q->reqs[i]) continue;
        int d = 0;
        uint64_t arrive = 0;
        ncclResult_t rc = fcn_test_at(q->reqs[i], &d, NULL, &arrive);
        if (rc != ncclSuccess) return rc;
        if (d) {
            q->reqs[i] = NULL;
            q->pending--;
            if (arrive > q->last_end) q->last_end = arrive;
        }
    }
    *done = q->pending == 0;
    if (!*done) return ncclSuccess;
    if (q->kind != COLL_ALLGATHER && q->count && !fc_no_payload()) {
        /* Every member reduces the members' data in rank order: the same bits everywhere. */
        const void **srcs = malloc((size_t)q->c->nranks * sizeof *srcs);
        if (!srcs) return ncclSystemError;
        for (int r = 0; r < q->c->nranks; r++) srcs[r] = r == q->c->rank ? q->send : q->gathered + (size_t)r * q->bytes;
        fc_reduce(&q->op, q->recv, srcs, q->c->nranks, q->count, false, false);
        free(srcs);
    }
    if (fcn_time_on()) {
        fcn_time_sent(q->upload, q->up_end);
        fcn_time_received(q->recv, fcn_time_reduced(q->c->dev, q->last_end, q->up_start, q->down));
    }
    if (size) *size = (int)q->bytes;
    request_free(q);
    return ncclSuccess;
}
