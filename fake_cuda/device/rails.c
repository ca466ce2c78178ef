/* The rail arithmetic of AllGather and ReduceScatter across hosts (rails.h). */
#include "rails.h"

#include <stdlib.h>

bool fc_rails_init(fc_rails *r, fc_coll *c, int nRails)
{
    const fc_nccl_launch *l = c->e->l;
    const fc_nccl_work *w = c->w;
    *r = (fc_rails){.nNodes = l->nNodes, .node = l->node, .nRails = nRails, .rank = l->rank,
                    .count = (int64_t)w->coll.collnetCount, .chunk = (int64_t)w->coll.collnetChunkCount};
    int64_t nChannels = w->coll.channelHi - w->coll.channelLo + 1;
    r->first = (c->ch->id - w->coll.channelLo) * r->chunk;
    r->stride = nChannels * r->chunk;
    r->grid = -1;
    r->inPlace = w->coll.sendbuff == w->coll.recvbuff + (uintptr_t)(r->rank * r->count) * c->esz;
    size_t n = (size_t)r->nNodes * (size_t)nRails * sizeof(int32_t);
    if (nRails <= 0 || r->nNodes <= 0 || !(r->denseToUser = malloc(n)) ||
        !fc_nccl_read(l->collNetDenseToUserRank, r->denseToUser, n)) {
        fc_emu_fail(c->e, "%s: CollNet's rank table (%d hosts x %d rails) is not readable", c->who, r->nNodes,
                    nRails);
        fc_rails_fini(r);
        return false;
    }
    return true;
}

void fc_rails_fini(fc_rails *r)
{
    free(r->denseToUser);
    r->denseToUser = NULL;
}

bool fc_rails_next(fc_rails *r)
{
    int64_t total = r->nNodes * r->count;
    r->grid = r->grid < 0 ? 0 : r->grid + r->stride;
    if (r->grid >= total) return false; /* every channel takes the same turns, empty windows too */
    r->beg = min64(r->grid + r->first, total);
    r->end = min64(r->beg + r->chunk, total);
    return true;
}

void fc_rails_own(const fc_rails *r, int64_t *beg, int64_t *n)
{
    int64_t oneBeg = r->node * r->count, oneEnd = oneBeg + r->count;
    int64_t b = r->beg > oneBeg ? r->beg : oneBeg, e = r->end < oneEnd ? r->end : oneEnd;
    *beg = b - oneBeg;
    *n = e > b ? e - b : 0;
}

bool fc_rails_piece(const fc_rails *r, int rail, int64_t *at, fc_rail_piece *out)
{
    if (*at >= r->end - r->beg) return false;
    int64_t pos = r->beg + *at;
    int node = (int)(pos / r->count);
    int64_t oneBeg = node * r->count;
    int rank = r->denseToUser[node * r->nRails + rail];
    out->off = *at;
    out->n = min64(r->end, oneBeg + r->count) - pos;
    out->user = rank * r->count + (pos - oneBeg);
    out->mine = rank == r->rank;
    *at += out->n;
    return true;
}

void fc_rails_gather(fc_prims *p, void *ctx, char *const *srcs, int nsrcs, char *const *dsts, int ndsts)
{
    const fc_rails_step *s = ctx;
    const fc_rails *r = s->r;
    int64_t esz = (int64_t)p->esz;
    if (ndsts && nsrcs) {
        const void *src = srcs[0];
        fc_prims_reduce_copy(p, &src, 1, (void *const *)dsts, ndsts, (size_t)fc_rails_size(r), false, false);
    }
    for (int i = 0; i < nsrcs && s->user; i++) {
        fc_rail_piece pc;
        for (int64_t at = 0; fc_rails_piece(r, (s->rail0 + i) % r->nRails, &at, &pc);) {
            if (r->inPlace && pc.mine) continue; /* already in place */
            const void *src = srcs[i] + pc.off * esz;
            void *d = p->bufs[FC_BUF_OUTPUT] + pc.user * esz;
            fc_prims_reduce_copy(p, &src, 1, &d, 1, (size_t)pc.n, false, false);
        }
    }
}

void fc_rails_scatter(fc_prims *p, void *ctx, char *const *srcs, int nsrcs, char *const *dsts, int ndsts)
{
    const fc_rails_step *s = ctx;
    const fc_rails *r = s->r;
    int64_t esz = (int64_t)p->esz;
    const void *src[FC_PRIMS_MAX_PEERS + 1];
    for (int k = 0; k < ndsts; k++) {
        if (!s->user) {
            for (int i = 0; i < nsrcs; i++) src[i] = srcs[i];
            fc_prims_reduce_copy(p, src, nsrcs, (void *const *)&dsts[k], 1, (size_t)fc_rails_size(r), false, false);
            continue;
        }
        fc_rail_piece pc;
        for (int64_t at = 0; fc_rails_piece(r, (s->rail0 + k) % r->nRails, &at, &pc);) {
            int ns = 0;
            src[ns++] = p->bufs[FC_BUF_INPUT] + pc.user * esz;
            for (int i = 0; i < nsrcs; i++) src[ns++] = srcs[i] + pc.off * esz;
            void *d = dsts[k] + pc.off * esz;
            fc_prims_reduce_copy(p, src, ns, &d, 1, (size_t)pc.n, true, false);
        }
    }
}
