/* NCCL's device algorithms replayed over the emulated primitives: what
 * RunWorkBatch / RunWorkColl of src/device/{all_reduce,all_gather,
 * reduce_scatter,broadcast,reduce,sendrecv}.h do for each work item, in the
 * same order and with the same element counts, so every connection takes the
 * steps the host side planned for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_emu.h"
#include "nccl_prims.h"

typedef struct {
    fc_emu *e;
    fc_task *t;
    const fc_nccl_channel *ch;
    const fc_nccl_func *func;
    const fc_nccl_work *w;
    fc_redop op;
    size_t esz;
    char who[120];
} coll_ctx;

static int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t align_up(int64_t a, int64_t b) { return div_up(a, b) * b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int grain(const fc_nccl_layout *L, int proto)
{
    return proto == FC_NCCL_PROTO_LL ? L->grain_LL : proto == FC_NCCL_PROTO_LL128 ? L->grain_LL128 : L->grain_SIMPLE;
}

/* ncclCollCbdPart: this channel's part of the work (elements). */
static void cbd_part(const coll_ctx *c, int64_t *count, int64_t *partOffset, int64_t *partCount, int64_t *chunkCount)
{
    const fc_nccl_work *w = c->w;
    int64_t eltPerGrain = grain(c->e->L, c->func->proto) / (int64_t)c->esz;
    int64_t nMid = (int64_t)w->coll.channelHi - w->coll.channelLo - 1;
    *count = (int64_t)w->coll.countLo + (int64_t)w->coll.countMid * (nMid > 0 ? nMid : 0) + (int64_t)w->coll.countHi;
    if (c->ch->id == w->coll.channelLo) {
        *partOffset = 0;
        *partCount = (int64_t)w->coll.countLo;
        *chunkCount = (int64_t)w->coll.chunkGrainsLo * eltPerGrain;
    } else if (c->ch->id == w->coll.channelHi) {
        *partOffset = (int64_t)w->coll.countLo + nMid * (int64_t)w->coll.countMid;
        *partCount = (int64_t)w->coll.countHi;
        *chunkCount = (int64_t)w->coll.chunkGrainsHi * eltPerGrain;
    } else {
        int64_t mid = c->ch->id - w->coll.channelLo - 1;
        *partOffset = (int64_t)w->coll.countLo + mid * (int64_t)w->coll.countMid;
        *partCount = (int64_t)w->coll.countMid;
        *chunkCount = (int64_t)w->coll.chunkGrainsMid * eltPerGrain;
    }
}

/* ProtoSimple<CHUNKSTEPS/SLICESTEPS, SLICESTEPS> of a collective, or LL/LL128. */
static fc_prims_cfg coll_cfg(const coll_ctx *c, int chunkSteps, int sliceSteps)
{
    fc_prims_cfg cfg = {.proto = c->func->proto, .slicePerChunk = 1, .stepPerSlice = 1};
    if (cfg.proto == FC_NCCL_PROTO_SIMPLE) {
        cfg.slicePerChunk = chunkSteps / sliceSteps;
        cfg.stepPerSlice = sliceSteps;
    }
    return cfg;
}

static bool ring_prims(coll_ctx *c, fc_prims *p, int chunkSteps, int sliceSteps)
{
    fc_prims_cfg cfg = coll_cfg(c, chunkSteps, sliceSteps);
    return fc_prims_init(p, c->e, c->t, c->ch, c->who, &cfg, &c->ch->ring_prev, 1, &c->ch->ring_next, 1,
                         c->w->coll.sendbuff, c->w->coll.recvbuff, c->op);
}

/* ring->userRanks[0..nRanks), read once per work rather than per chunk;
 * [0] is this rank, [1] the next, [nRanks-1] the previous. NULL: failed
 * (said why); the caller frees it. */
static int32_t *ring_user_ranks(const coll_ctx *c)
{
    size_t n = (size_t)c->e->l->nRanks * sizeof(int32_t);
    int32_t *r = malloc(n);
    if (!r || !c->ch->ring_userRanks || !fc_nccl_read(c->ch->ring_userRanks, r, n)) {
        fc_emu_fail(c->e, "%s: the ring's ranks are not readable", c->who);
        free(r);
        return NULL;
    }
    return r;
}

/* ---- AllReduce ---- */

static void allreduce_ring(coll_ctx *c)
{
    const fc_nccl_layout *L = c->e->L;
    int nranks = c->e->l->nRanks, ringIx = c->ch->ring_index;
    int64_t count, gridOffset, channelCount, chunkCount;
    cbd_part(c, &count, &gridOffset, &channelCount, &chunkCount);
    const int64_t loopCount = nranks * chunkCount;
    fc_prims p;
    if (!ring_prims(c, &p, L->ALLREDUCE_CHUNKSTEPS, L->ALLREDUCE_SLICESTEPS)) return;
#define MODR(r) ((r) >= nranks ? (r) - nranks : (r))
#define AT(chunk) (gridOffset + elemOffset + (int64_t)(chunk) * chunkCount)
#define N(chunk) min64(chunkCount, remCount - (int64_t)(chunk) * chunkCount)
    for (int64_t elemOffset = 0; elemOffset < channelCount; elemOffset += loopCount) {
        int64_t remCount = channelCount - elemOffset;
        if (remCount < loopCount) chunkCount = align_up(div_up(remCount, nranks), 16 / (int64_t)c->esz);
        int chunk = MODR(ringIx + nranks - 1);
        FC_SEND(&p, AT(chunk), N(chunk));
        for (int j = 2; j < nranks; ++j) {
            chunk = MODR(ringIx + nranks - j);
            FC_RECV_REDUCE_SEND(&p, AT(chunk), N(chunk));
        }
        chunk = ringIx;
        FC_RECV_REDUCE_COPY_SEND(&p, AT(chunk), AT(chunk), N(chunk), true);
        for (int j = 1; j < nranks - 1; ++j) {
            chunk = MODR(ringIx + nranks - j);
            FC_RECV_COPY_SEND(&p, AT(chunk), N(chunk));
        }
        chunk = MODR(ringIx + 1);
        FC_RECV(&p, AT(chunk), N(chunk), false);
    }
#undef MODR
#undef AT
#undef N
    fc_prims_fini(&p);
}

/* runTreeSplit: the root reduces and broadcasts in one pass; every other rank
 * reduces up and broadcasts down at the same time (two groups of warps). */
typedef struct {
    coll_ctx *c;
    bool up;
} tree_half;

static void tree_loop(coll_ctx *c, fc_prims *p, int kind)
{
    int64_t count, gridOffset, channelCount, chunkCount;
    cbd_part(c, &count, &gridOffset, &channelCount, &chunkCount);
    for (int64_t elemOffset = 0; elemOffset < channelCount; elemOffset += chunkCount) {
        int64_t offset = gridOffset + elemOffset, nelem = min64(chunkCount, channelCount - elemOffset);
        switch (kind) {
        case 0: FC_RECV_REDUCE_COPY_SEND(p, offset, offset, nelem, true); break; /* root */
        case 1: FC_SEND(p, offset, nelem); break;                                 /* leaf, up */
        case 2: FC_RECV_REDUCE_SEND(p, offset, nelem); break;                     /* middle, up */
        case 3: FC_RECV(p, offset, nelem, false); break;                          /* leaf, down */
        default: FC_RECV_COPY_SEND(p, offset, nelem); break;                      /* middle, down */
        }
    }
}

static void tree_half_run(fc_task *t, void *arg)
{
    tree_half *h = arg;
    coll_ctx c = *h->c;
    c.t = t;
    char who[sizeof c.who + 20];
    snprintf(who, sizeof who, "%s (%s)", h->c->who, h->up ? "reduce up" : "broadcast down");
    const fc_nccl_channel *ch = c.ch;
    fc_prims_cfg cfg = coll_cfg(&c, 1, 1);
    fc_prims p;
    bool leaf = ch->tree_down[0] < 0;
    bool ok = h->up ? fc_prims_init(&p, c.e, t, ch, who, &cfg, ch->tree_down, 3, &ch->tree_up, 1,
                                    c.w->coll.sendbuff, c.w->coll.recvbuff, c.op)
                    : fc_prims_init(&p, c.e, t, ch, who, &cfg, &ch->tree_up, 1, ch->tree_down, 3,
                                    c.w->coll.sendbuff, c.w->coll.recvbuff, c.op);
    if (!ok) return;
    tree_loop(&c, &p, h->up ? (leaf ? 1 : 2) : (leaf ? 3 : 4));
    fc_prims_fini(&p);
}

static void allreduce_tree(coll_ctx *c)
{
    const fc_nccl_channel *ch = c->ch;
    if (ch->tree_up < 0) {
        fc_prims_cfg cfg = coll_cfg(c, 1, 1);
        fc_prims p;
        if (!fc_prims_init(&p, c->e, c->t, ch, c->who, &cfg, ch->tree_down, 3, ch->tree_down, 3, c->w->coll.sendbuff,
                           c->w->coll.recvbuff, c->op))
            return;
        tree_loop(c, &p, 0);
        fc_prims_fini(&p);
        return;
    }
    tree_half halves[2] = {{c, true}, {c, false}};
    for (int i = 0; i < 2; i++)
        if (!fc_task_spawn(fc_task_sched(c->t), c->t, tree_half_run, &halves[i]))
            fc_emu_fail(c->e, "%s: out of memory", c->who);
    fc_task_join(c->t);
}

/* ---- AllGather, ReduceScatter, Broadcast, Reduce (rings) ---- */

static void allgather_ring(coll_ctx *c)
{
    const fc_nccl_layout *L = c->e->L;
    int nranks = c->e->l->nRanks;
    int64_t count, partOffset, partCount, chunkCount;
    cbd_part(c, &count, &partOffset, &partCount, &chunkCount);
    int32_t *ur = ring_user_ranks(c);
    fc_prims p;
    if (!ur) return;
    if (!ring_prims(c, &p, L->ALLGATHER_CHUNKSTEPS, L->ALLGATHER_SLICESTEPS)) {
        free(ur);
        return;
    }
    uintptr_t in = c->w->coll.sendbuff, out = c->w->coll.recvbuff;
    for (int64_t elemOffset = 0; elemOffset < partCount; elemOffset += chunkCount) {
        int64_t nelem = min64(chunkCount, partCount - elemOffset), dataOffset = partOffset + elemOffset;
        int64_t offset = dataOffset + ur[0] * count;
        if (in + (uintptr_t)(dataOffset * (int64_t)c->esz) == out + (uintptr_t)(offset * (int64_t)c->esz))
            FC_SEND(&p, dataOffset, nelem);
        else
            FC_COPY_SEND(&p, dataOffset, offset, nelem);
        for (int j = 1; j < nranks - 1; ++j) FC_RECV_COPY_SEND(&p, dataOffset + ur[nranks - j] * count, nelem);
        FC_RECV(&p, dataOffset + ur[1] * count, nelem, false);
    }
    fc_prims_fini(&p);
    free(ur);
}

static void reducescatter_ring(coll_ctx *c)
{
    const fc_nccl_layout *L = c->e->L;
    int nranks = c->e->l->nRanks;
    int64_t count, gridOffset, channelCount, chunkCount;
    cbd_part(c, &count, &gridOffset, &channelCount, &chunkCount);
    int32_t *ur = ring_user_ranks(c);
    fc_prims p;
    if (!ur) return;
    if (!ring_prims(c, &p, L->REDUCESCATTER_CHUNKSTEPS, L->REDUCESCATTER_SLICESTEPS)) {
        free(ur);
        return;
    }
    for (int64_t elemOffset = 0; elemOffset < channelCount; elemOffset += chunkCount) {
        int64_t nelem = min64(chunkCount, channelCount - elemOffset), dataOffset = gridOffset + elemOffset;
        FC_SEND(&p, dataOffset + ur[nranks - 1] * count, nelem);
        for (int j = 2; j < nranks; ++j) FC_RECV_REDUCE_SEND(&p, dataOffset + ur[nranks - j] * count, nelem);
        FC_RECV_REDUCE_COPY(&p, dataOffset + ur[0] * count, dataOffset, nelem, true);
    }
    fc_prims_fini(&p);
    free(ur);
}

static void broadcast_ring(coll_ctx *c)
{
    const fc_nccl_layout *L = c->e->L;
    int rank = c->e->l->rank, next = c->ch->ring_next, root = (int)c->w->coll.root;
    int64_t count, gridOffset, channelCount, chunkCount;
    cbd_part(c, &count, &gridOffset, &channelCount, &chunkCount);
    fc_prims p;
    if (!ring_prims(c, &p, L->BROADCAST_CHUNKSTEPS, L->BROADCAST_SLICESTEPS)) return;
    bool inPlace = c->w->coll.sendbuff == c->w->coll.recvbuff;
    for (int64_t elemOffset = 0; elemOffset < channelCount; elemOffset += chunkCount) {
        int64_t offset = gridOffset + elemOffset, nelem = min64(chunkCount, channelCount - elemOffset);
        if (rank == root) {
            if (inPlace) FC_SEND(&p, offset, nelem);
            else FC_COPY_SEND(&p, offset, offset, nelem);
        } else if (next == root) {
            FC_RECV(&p, offset, nelem, false);
        } else {
            FC_RECV_COPY_SEND(&p, offset, nelem);
        }
    }
    fc_prims_fini(&p);
}

static void reduce_ring(coll_ctx *c)
{
    const fc_nccl_layout *L = c->e->L;
    int rank = c->e->l->rank, prev = c->ch->ring_prev, root = (int)c->w->coll.root;
    int64_t count, gridOffset, channelCount, chunkCount;
    cbd_part(c, &count, &gridOffset, &channelCount, &chunkCount);
    fc_prims p;
    if (!ring_prims(c, &p, L->REDUCE_CHUNKSTEPS, L->REDUCE_SLICESTEPS)) return;
    for (int64_t elemOffset = 0; elemOffset < channelCount; elemOffset += chunkCount) {
        int64_t offset = gridOffset + elemOffset, nelem = min64(chunkCount, channelCount - elemOffset);
        if (prev == root) FC_SEND(&p, offset, nelem);
        else if (rank == root) FC_RECV_REDUCE_COPY(&p, offset, offset, nelem, true);
        else FC_RECV_REDUCE_SEND(&p, offset, nelem);
    }
    fc_prims_fini(&p);
}

/* AllGatherV (2.29+, what ncclBroadcast becomes): one ring for the whole
 * batch; each work is one root's broadcast, moved a chunk at a time in turn
 * (all_gather_v.h runAllGatherV). */
static void allgatherv_batch(fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const fc_nccl_batch *b)
{
    char who[120];
    snprintf(who, sizeof who, "rank %d channel %d %s", e->l->rank, ch->id, b->func->name);
    fc_prims_cfg cfg = {.proto = b->func->proto, .slicePerChunk = 1, .stepPerSlice = 1};
    fc_redop op = {.type = FC_NCCL_TYPE_i8, .redop = FC_NCCL_REDOP_Sum, .arg = 0};
    fc_prims p;
    if (!fc_prims_init(&p, e, t, ch, who, &cfg, &ch->ring_prev, 1, &ch->ring_next, 1, 0, 0, op)) return;
    fc_nccl_work *works = malloc((size_t)b->nworks * sizeof *works);
    if (!works) {
        fc_emu_fail(e, "%s: out of memory", who);
        return;
    }
    memcpy(works, &e->l->works[b->first_work], (size_t)b->nworks * sizeof *works);
    for (int w = 0, done = 0; b->nworks && !done && !fc_emu_failed(e); w = (w + 1) % b->nworks) {
        fc_nccl_work *k = &works[w];
        int64_t delta = (int64_t)(k->bcast.bytes < (uint64_t)k->bcast.chunkSize ? k->bcast.bytes
                                                                                 : (uint64_t)k->bcast.chunkSize);
        int64_t offset = (int64_t)k->bcast.bytesDone;
        p.bufs[FC_BUF_INPUT] = k->bcast.ringDepth == 0 ? (char *)k->bcast.sendbuff : NULL;
        p.bufs[FC_BUF_OUTPUT] = (char *)k->bcast.recvbuff;
        if (delta > 0) {
            if (k->bcast.ringDepth == 0) {
                if (p.bufs[FC_BUF_INPUT] == p.bufs[FC_BUF_OUTPUT]) FC_SEND(&p, offset, delta);
                else FC_COPY_SEND(&p, offset, offset, delta);
            } else if (k->bcast.ringDepth == e->l->nRanks - 1) {
                FC_RECV(&p, offset, delta, false);
            } else {
                FC_RECV_COPY_SEND(&p, offset, delta);
            }
        }
        k->bcast.bytes -= (uint64_t)delta;
        k->bcast.bytesDone += (uint64_t)delta;
        done = 1;
        for (int i = 0; i < b->nworks; i++) done &= works[i].bcast.bytes == 0;
    }
    free(works);
    fc_prims_fini(&p);
}

static void run_coll(fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const fc_nccl_batch *b, const fc_nccl_work *w)
{
    const fc_nccl_func *f = b->func;
    coll_ctx c = {.e = e, .t = t, .ch = ch, .func = f, .w = w};
    /* Collectives without a reduction move bytes (NCCL instantiates them on int8). */
    c.op.type = f->type >= 0 ? f->type : FC_NCCL_TYPE_u8;
    c.op.redop = f->redop >= 0 ? f->redop : FC_NCCL_REDOP_Sum;
    c.op.arg = w->coll.redOpArg;
    c.esz = fc_nccl_type_size(c.op.type);
    if (w->coll.redOpArgIsPtr) { /* the scalar lives in device memory */
        uint64_t v = 0;
        if (!fc_nccl_read((uintptr_t)w->coll.redOpArg, &v, c.esz)) {
            fc_emu_fail(e, "rank %d channel %d: the reduction scalar is not readable", e->l->rank, ch->id);
            return;
        }
        c.op.arg = v;
    }
    snprintf(c.who, sizeof c.who, "rank %d channel %d %s", e->l->rank, ch->id, f->name);
    if (f->coll == FC_NCCL_COLL_AllReduce && f->algo == FC_NCCL_ALGO_RING) allreduce_ring(&c);
    else if (f->coll == FC_NCCL_COLL_AllReduce && f->algo == FC_NCCL_ALGO_TREE) allreduce_tree(&c);
    else if (f->coll == FC_NCCL_COLL_AllGather) allgather_ring(&c);
    else if (f->coll == FC_NCCL_COLL_ReduceScatter) reducescatter_ring(&c);
    else if (f->coll == FC_NCCL_COLL_Broadcast) broadcast_ring(&c);
    else if (f->coll == FC_NCCL_COLL_Reduce) reduce_ring(&c);
    else fc_emu_fail(e, "rank %d channel %d: %s is not emulated", e->l->rank, ch->id, f->name); /* checked at launch */
}

/* ---- SendRecv (sendrecv.h RunWorkBatch<ncclFuncSendRecv>) ---- */

static uint32_t u32fp8_decode(uint8_t x)
{
    uint32_t exponent = x >> 3, mantissa = (x & 7u) | (exponent ? 8u : 0u);
    if (exponent) exponent -= 1;
    return mantissa << exponent;
}

typedef struct {
    fc_emu *e;
    const fc_nccl_channel *ch;
    bool send, ll;
    int peer;
    uintptr_t addr;
    uint64_t bytes;
    uint32_t chunkSize;
    char who[120];
} p2p_flow;

static void p2p_run(fc_task *t, void *arg)
{
    p2p_flow *f = arg;
    fc_prims_cfg cfg = {.proto = f->ll ? FC_NCCL_PROTO_LL : FC_NCCL_PROTO_SIMPLE,
                        .slicePerChunk = 1,
                        .stepPerSlice = 1,
                        .stepBytes = f->e->l->p2pChunkSize,
                        .connIndex = 1};
    fc_redop op = {.type = FC_NCCL_TYPE_i8, .redop = FC_NCCL_REDOP_Sum, .arg = 0};
    int none = -1;
    fc_prims p;
    if (!fc_prims_init(&p, f->e, t, f->ch, f->who, &cfg, f->send ? &none : &f->peer, 1, f->send ? &f->peer : &none, 1,
                       f->send ? f->addr : 0, f->send ? 0 : f->addr, op))
        return;
    uint64_t cursor = 0;
    do { /* a zero-byte transfer still takes one step */
        int64_t n = (int64_t)(f->bytes - cursor < f->chunkSize ? f->bytes - cursor : f->chunkSize);
        if (f->send) FC_SEND(&p, (int64_t)cursor, n);
        else FC_RECV(&p, (int64_t)cursor, n, false);
        cursor += (uint64_t)n;
    } while (cursor < f->bytes);
    fc_prims_fini(&p);
}

static void run_p2p_batch(fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const fc_nccl_batch *b)
{
    fc_nccl_launch *l = e->l;
    p2p_flow *flows = calloc((size_t)b->nworks * 2, sizeof *flows);
    if (!flows) {
        fc_emu_fail(e, "rank %d channel %d: out of memory", l->rank, ch->id);
        return;
    }
    for (int i = 0; i < b->nworks; i++) {
        fc_nccl_work w = l->works[b->first_work + i];
        int part = fc_nccl_p2p_part(l, w.p2p.nP2pChannels, w.p2p.channelBase, ch->id);
        bool has[2];
        for (int s = 0; s < 2; s++) { /* 0 recv, 1 send: the part this channel moves */
            int nParts = s ? w.p2p.nSendChannels : w.p2p.nRecvChannels;
            uint64_t *bytes = s ? &w.p2p.sendBytes : &w.p2p.recvBytes;
            uintptr_t *addr = s ? &w.p2p.sendAddr : &w.p2p.recvAddr;
            has[s] = part < nParts;
            if (nParts) { /* ncclP2pPartBounds */
                uint64_t partBytes = (uint64_t)align_up((int64_t)div_up((int64_t)*bytes, nParts), 4 << 10);
                uint64_t beg = (uint64_t)part * partBytes, end = (uint64_t)(part + 1) * partBytes;
                beg = beg < *bytes ? beg : *bytes;
                end = end < *bytes ? end : *bytes;
                *addr += beg;
                *bytes = end - beg;
            }
        }
        if (w.p2p.sendRank == l->rank) { /* to oneself: a copy */
            if (w.p2p.sendBytes) memmove((void *)w.p2p.recvAddr, (const void *)w.p2p.sendAddr, w.p2p.sendBytes);
            fc_task_progress(t);
            continue;
        }
        /* the kernel's warps: without a receive part they all send */
        bool doSend = !has[0] || has[1], doRecv = has[0];
        for (int s = 0; s < 2; s++) {
            if (!(s ? doSend : doRecv)) continue;
            p2p_flow *f = &flows[2 * i + s];
            f->e = e;
            f->ch = ch;
            f->send = s;
            f->ll = s ? w.p2p.sendProtoLL : w.p2p.recvProtoLL;
            f->peer = s ? w.p2p.sendRank : w.p2p.recvRank;
            f->addr = s ? w.p2p.sendAddr : w.p2p.recvAddr;
            f->bytes = s ? w.p2p.sendBytes : w.p2p.recvBytes;
            f->chunkSize = u32fp8_decode(s ? w.p2p.sendChunkSize_u32fp8 : w.p2p.recvChunkSize_u32fp8);
            snprintf(f->who, sizeof f->who, "rank %d channel %d %s %s rank %d", l->rank, ch->id,
                     s ? "send" : "recv", s ? "to" : "from", f->peer);
            if (!f->chunkSize) f->chunkSize = 1;
            if (!fc_task_spawn(fc_task_sched(t), t, p2p_run, f)) fc_emu_fail(e, "%s: out of memory", f->who);
        }
    }
    fc_task_join(t);
    free(flows);
}

void fc_algo_run_batch(fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const fc_nccl_batch *b)
{
    if (b->workType == FC_NCCL_WORK_P2P) {
        run_p2p_batch(e, t, ch, b);
        return;
    }
    if (b->workType == FC_NCCL_WORK_BCAST) {
        allgatherv_batch(e, t, ch, b);
        return;
    }
    for (int i = 0; i < b->nworks && !fc_emu_failed(e); i++) run_coll(e, t, ch, b, &e->l->works[b->first_work + i]);
}
