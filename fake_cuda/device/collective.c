/* The parts of a collective work item every algorithm uses (see collective.h). */
#include "collective.h"

#include <stdlib.h>

#include "names.h"

static int grain(const fc_nccl_layout *L, int proto)
{
    return proto == FC_NCCL_PROTO_LL ? L->grain_LL : proto == FC_NCCL_PROTO_LL128 ? L->grain_LL128 : L->grain_SIMPLE;
}

void fc_coll_part(const fc_coll *c, int64_t *count, int64_t *partOffset, int64_t *partCount, int64_t *chunkCount)
{
    const fc_nccl_work *w = c->w;
    int64_t eltPerGrain = grain(c->e->L, c->func->proto) / (int64_t)c->esz;
    int64_t nMid = (int64_t)w->coll.channelHi - w->coll.channelLo - 1;
    *count = fc_nccl_cbd_count(w);
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

fc_prims_cfg fc_coll_cfg(const fc_coll *c, int chunkSteps, int sliceSteps)
{
    fc_prims_cfg cfg = {.proto = c->func->proto, .slicePerChunk = 1, .stepPerSlice = 1};
    if (cfg.proto == FC_NCCL_PROTO_SIMPLE) {
        cfg.slicePerChunk = chunkSteps / sliceSteps;
        cfg.stepPerSlice = sliceSteps;
    }
    return cfg;
}

bool fc_coll_ring_prims(fc_coll *c, fc_prims *p, int chunkSteps, int sliceSteps)
{
    fc_prims_cfg cfg = fc_coll_cfg(c, chunkSteps, sliceSteps);
    return fc_prims_init(p, c->e, c->t, c->ch, c->who, &cfg, &c->ch->ring_prev, 1, &c->ch->ring_next, 1,
                         c->w->coll.sendbuff, c->w->coll.recvbuff, c->op);
}

int32_t *fc_coll_ring_user_ranks(const fc_coll *c)
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

typedef struct {
    const fc_coll *c;
    fc_coll_role_fn fn;
    int role;
    const char *name;
} role_flow;

static void role_flow_run(fc_task *t, void *arg)
{
    const role_flow *f = arg;
    fc_coll c = *f->c;
    c.t = t;
    fc_flow_name_add_role(c.who, sizeof c.who, f->name);
    f->fn(&c, f->role);
}

void fc_coll_run_roles(fc_coll *c, fc_coll_role_fn fn, const int *roles, const char *const *names, int n)
{
    role_flow flows[8];
    for (int i = 0; i < n && i < 8; i++) {
        flows[i] = (role_flow){c, fn, roles[i], names[roles[i]]};
        if (!fc_task_spawn(fc_task_sched(c->t), c->t, role_flow_run, &flows[i])) fc_emu_fail(c->e, "%s: out of memory", c->who);
    }
    fc_task_join(c->t);
}
