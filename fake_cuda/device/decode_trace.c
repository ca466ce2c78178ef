/* The "nccl_launch" trace event: what was decoded of one NCCL kernel launch
 * (see decode.h), for tests and for finding a wrong layout. */
#include "decode.h"

#include <stdarg.h>
#include <stdio.h>

#include "names.h"
#include "trace.h"

/* The trace's argument text is limited (trace.c cuts at 1 KiB, which would
 * break the JSON): pieces that would not fit are left out whole. */
struct text {
    char buf[1000];
    size_t len;
    bool full;
};
#define TEXT_ROOM 920 /* what repeated pieces may use; the rest is for closing brackets */

static bool add(struct text *t, size_t limit, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool add(struct text *t, size_t limit, const char *fmt, ...)
{
    if (t->full && limit == TEXT_ROOM) return false;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, sizeof t->buf - t->len, fmt, ap);
    va_end(ap);
    if (n < 0 || t->len + (size_t)n >= limit) {
        t->buf[t->len] = 0; /* leave the piece out */
        t->full = true;
        return false;
    }
    t->len += (size_t)n;
    return true;
}
#define ADD(t, ...) add(t, TEXT_ROOM, __VA_ARGS__)
#define CLOSE(t, ...) add(t, sizeof (t)->buf, __VA_ARGS__)

/* One "nccl_launch" event per decoded launch: release, kernel, grid, channel
 * mask, work storage, rank/nranks/nnodes, counts of batches, works and
 * connections (conns_bad: not in simulated memory), the first problem found;
 * the first batch's function and its parts; every funcId; the first
 * collective's element count, root, channel range and warps; the distinct P2P
 * transfers [sendRank, sendBytes, recvRank, recvBytes]; per channel
 * [id, ring prev, ring next]. */
void fc_nccl_trace_launch(const fc_nccl_launch *l)
{
    struct text t = {.len = 0};
    ADD(&t, "\"version\":\"%s\",\"kernel\":\"%.80s\",\"stream\":%llu,\"grid\":%u,\"block\":%u,\"mask\":\"0x%llx\","
            "\"storage\":%d,\"rank\":%d,\"nranks\":%d,\"nnodes\":%d,\"batches\":%d,\"works\":%d,\"conns\":%d,"
            "\"conns_bad\":%d,\"error\":\"%s\"",
        l->rel->version, l->kernel, l->stream, l->grid, l->block, (unsigned long long)l->channelMask, l->storage,
        l->rank, l->nRanks, l->nNodes, l->nbatches, l->nworks, l->nconns, l->nconns_bad, l->error);
    const fc_nccl_batch *first = l->nbatches ? &l->batches[0] : NULL;
    if (first && first->func) {
        const fc_nccl_func *f = first->func;
        ADD(&t, ",\"func\":\"%s\",\"coll\":\"%s\",\"redop\":\"%s\",\"type\":\"%s\",\"algo\":\"%s\",\"proto\":\"%s\"",
            f->name, fc_nccl_coll_name(f->coll), fc_nccl_redop_name(f->redop), fc_nccl_type_name(f->type),
            fc_nccl_algo_name(f->algo), fc_nccl_proto_name(f->proto));
    }
    /* every distinct funcId, in order of first use */
    bool open = ADD(&t, ",\"funcIds\":[");
    for (int i = 0, shown = 0; i < l->nbatches; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = l->batches[j].funcId == l->batches[i].funcId;
        if (!seen) ADD(&t, "%s%d", shown++ ? "," : "", l->batches[i].funcId);
    }
    if (open) CLOSE(&t, "]");
    /* the first collective's size; the distinct point-to-point transfers */
    for (int i = 0; i < l->nworks; i++) {
        const fc_nccl_work *w = &l->works[i];
        if (w->type != FC_NCCL_WORK_COLL && w->type != FC_NCCL_WORK_COLLREG) continue;
        unsigned long long count = (unsigned long long)fc_nccl_cbd_count(w);
        ADD(&t, ",\"count\":%llu,\"root\":%u,\"channels\":[%u,%u],\"nwarps\":%u", count, w->coll.root,
            w->coll.channelLo, w->coll.channelHi, w->coll.nWarps);
        break;
    }
    open = ADD(&t, ",\"p2p\":[");
    for (int i = 0, shown = 0; i < l->nworks; i++) {
        const fc_nccl_work *w = &l->works[i];
        if (w->type != FC_NCCL_WORK_P2P) continue;
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = l->works[j].type == FC_NCCL_WORK_P2P && l->works[j].p2p.sendRank == w->p2p.sendRank &&
                   l->works[j].p2p.recvRank == w->p2p.recvRank && l->works[j].p2p.sendBytes == w->p2p.sendBytes &&
                   l->works[j].p2p.recvBytes == w->p2p.recvBytes;
        if (!seen)
            ADD(&t, "%s[%d,%llu,%d,%llu]", shown++ ? "," : "", w->p2p.sendRank,
                (unsigned long long)w->p2p.sendBytes, w->p2p.recvRank, (unsigned long long)w->p2p.recvBytes);
    }
    if (open) CLOSE(&t, "]");
    open = ADD(&t, ",\"ring\":[");
    for (int i = 0; i < l->nchannels; i++)
        ADD(&t, "%s[%d,%d,%d]", i ? "," : "", l->channels[i].id, l->channels[i].ring_prev, l->channels[i].ring_next);
    if (open) CLOSE(&t, "]");
    CLOSE(&t, ",\"truncated\":%s", t.full ? "true" : "false");
    fc_trace_event("nccl_launch", "%s", t.buf);
}
