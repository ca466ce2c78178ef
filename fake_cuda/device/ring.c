/* The Ring algorithm of AllReduce, AllGather, ReduceScatter, Broadcast and
 * Reduce: RunWorkColl<..., NCCL_ALGO_RING, ...> of src/device/{all_reduce,
 * all_gather,reduce_scatter,broadcast,reduce}.h, chunk for chunk. */
#include <stdlib.h>

#include "algorithms.h"
#include "collective.h"

void fc_allreduce_ring(fc_coll *c)
{
    const fc_nccl_layout *L = c->e->L;
    int nranks = c->e->l->nRanks, ringIx = c->ch->ring_index;
    int64_t count, gridOffset, channelCount, chunkCount;
    fc_coll_part(c, &count, &gridOffset, &channelCount, &chunkCount);
    const int64_t loopCount = nranks * chunkCount;
    fc_prims p;
    if (!fc_coll_ring_prims(c, &p, L->ALLREDUCE_CHUNKSTEPS, L->ALLREDUCE_SLICESTEPS)) return;
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

void fc_allgather_ring(fc_coll *c)
{
    const fc_nccl_layout *L = c->e->L;
    int nranks = c->e->l->nRanks;
    int64_t count, partOffset, partCount, chunkCount;
    fc_coll_part(c, &count, &partOffset, &partCount, &chunkCount);
    int32_t *ur = fc_coll_ring_user_ranks(c);
    fc_prims p;
    if (!ur) return;
    if (!fc_coll_ring_prims(c, &p, L->ALLGATHER_CHUNKSTEPS, L->ALLGATHER_SLICESTEPS)) {
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

void fc_reducescatter_ring(fc_coll *c)
{
    const fc_nccl_layout *L = c->e->L;
    int nranks = c->e->l->nRanks;
    int64_t count, gridOffset, channelCount, chunkCount;
    fc_coll_part(c, &count, &gridOffset, &channelCount, &chunkCount);
    int32_t *ur = fc_coll_ring_user_ranks(c);
    fc_prims p;
    if (!ur) return;
    if (!fc_coll_ring_prims(c, &p, L->REDUCESCATTER_CHUNKSTEPS, L->REDUCESCATTER_SLICESTEPS)) {
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

void fc_broadcast_ring(fc_coll *c)
{
    const fc_nccl_layout *L = c->e->L;
    int rank = c->e->l->rank, next = c->ch->ring_next, root = (int)c->w->coll.root;
    int64_t count, gridOffset, channelCount, chunkCount;
    fc_coll_part(c, &count, &gridOffset, &channelCount, &chunkCount);
    fc_prims p;
    if (!fc_coll_ring_prims(c, &p, L->BROADCAST_CHUNKSTEPS, L->BROADCAST_SLICESTEPS)) return;
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

void fc_reduce_ring(fc_coll *c)
{
    const fc_nccl_layout *L = c->e->L;
    int rank = c->e->l->rank, prev = c->ch->ring_prev, root = (int)c->w->coll.root;
    int64_t count, gridOffset, channelCount, chunkCount;
    fc_coll_part(c, &count, &gridOffset, &channelCount, &chunkCount);
    fc_prims p;
    if (!fc_coll_ring_prims(c, &p, L->REDUCE_CHUNKSTEPS, L->REDUCE_SLICESTEPS)) return;
    for (int64_t elemOffset = 0; elemOffset < channelCount; elemOffset += chunkCount) {
        int64_t offset = gridOffset + elemOffset, nelem = min64(chunkCount, channelCount - elemOffset);
        if (prev == root) FC_SEND(&p, offset, nelem);
        else if (rank == root) FC_RECV_REDUCE_COPY(&p, offset, offset, nelem, true);
        else FC_RECV_REDUCE_SEND(&p, offset, nelem);
    }
    fc_prims_fini(&p);
}
