/* Point-to-point work: sendrecv.h RunWorkBatch<ncclFuncSendRecv>. */
#include <stdlib.h>
#include <string.h>

#include "algorithms.h"
#include "int_math.h"
#include "names.h"
#include "prims.h"


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
                        .connIndexRecv = 1, .connIndexSend = 1};
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

void fc_sendrecv_batch(fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const fc_nccl_batch *b)
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
            fc_flow_name(f->who, sizeof f->who, l->rank, ch->id, s ? "send to rank" : "recv from rank", f->peer);
            if (!f->chunkSize) f->chunkSize = 1;
            if (!fc_task_spawn(fc_task_sched(t), t, p2p_run, f)) fc_emu_fail(e, "%s: out of memory", f->who);
        }
    }
    fc_task_join(t);
    free(flows);
}
