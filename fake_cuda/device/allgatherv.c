/* AllGatherV's batched broadcasts (ncclDevWorkBcast work). */
#include <stdlib.h>
#include <string.h>

#include "algorithms.h"
#include "names.h"
#include "prims.h"

/* AllGatherV (2.29+, what ncclBroadcast becomes): one ring for the whole
 * batch; each work is one root's broadcast, moved a chunk at a time in turn
 * (all_gather_v.h runAllGatherV). */
void fc_allgatherv_batch(fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const fc_nccl_batch *b)
{
    char who[120];
    fc_flow_name(who, sizeof who, e->l->rank, ch->id, b->func->name, -1);
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
