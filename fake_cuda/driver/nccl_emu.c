/* Replaying an NCCL kernel launch (see nccl_emu.h): one flow per CUDA block
 * (channel) runs its batches in order; flows of one launch share a scheduler
 * on the stream's worker thread. */
#include "nccl_emu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fc_emu_fail(fc_emu *e, const char *fmt, ...)
{
    if (e->error[0]) return; /* the first failure; later ones follow from it */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->error, sizeof e->error, fmt, ap);
    va_end(ap);
}

static bool supported_coll(const fc_nccl_func *f)
{
    switch (f->coll) {
    case FC_NCCL_COLL_AllReduce: return f->algo == FC_NCCL_ALGO_RING || f->algo == FC_NCCL_ALGO_TREE;
    case FC_NCCL_COLL_AllGather:
    case FC_NCCL_COLL_ReduceScatter:
    case FC_NCCL_COLL_Broadcast:
    case FC_NCCL_COLL_Reduce: return f->algo == FC_NCCL_ALGO_RING;
    default: return false;
    }
}

bool fc_emu_unsupported(const fc_nccl_launch *l, char *why, size_t n)
{
    for (int i = 0; i < l->nbatches; i++) {
        const fc_nccl_batch *b = &l->batches[i];
        const char *name = b->func ? b->func->name : "?";
        if (b->workType == FC_NCCL_WORK_P2P) {
            for (int k = 0; k < b->nworks; k++) {
                const fc_nccl_work *w = &l->works[b->first_work + k];
                if (w->p2p.sendIpcReg || w->p2p.recvIpcReg || w->p2p.sendNetReg || w->p2p.recvNetReg) {
                    snprintf(why, n, "send/receive with registered user buffers");
                    return true;
                }
            }
            continue;
        }
        if (b->func && b->func->coll == FC_NCCL_COLL_Nop) continue;
        if (b->workType != FC_NCCL_WORK_COLL || !b->func || !supported_coll(b->func)) {
            snprintf(why, n, "%s (%s work)", name,
                     b->workType == FC_NCCL_WORK_COLLREG ? "registered-buffer"
                     : b->workType == FC_NCCL_WORK_BCAST ? "batched broadcast"
                                                         : "collective");
            return true;
        }
        for (int k = 0; k < b->nworks; k++) {
            const fc_nccl_work *w = &l->works[b->first_work + k];
            if (w->coll.regUsed || w->coll.netRegUsed) {
                snprintf(why, n, "%s with registered user buffers", name);
                return true;
            }
        }
    }
    return false;
}

typedef struct {
    fc_emu *e;
    const fc_nccl_channel *ch;
} channel_flow;

static void run_channel(fc_task *t, void *arg)
{
    channel_flow *f = arg;
    for (int i = 0; i < f->ch->nbatches && !fc_emu_failed(f->e); i++)
        fc_algo_run_batch(f->e, t, f->ch, &f->e->l->batches[f->ch->first_batch + i]);
}

static bool should_stop(void *arg)
{
    fc_emu *e = arg;
    return fc_emu_failed(e) || (e->abortFlag && __atomic_load_n(e->abortFlag, __ATOMIC_ACQUIRE));
}

void fc_emu_run(fc_nccl_launch *l)
{
    fc_emu e = {.l = l, .L = l->rel->layout};
    if (l->abortFlag && fc_nccl_in_sim_memory(l->abortFlag, 4)) e.abortFlag = (volatile uint32_t *)l->abortFlag;
    channel_flow *flows = calloc((size_t)l->nchannels, sizeof *flows);
    e.sched = fc_sched_new(should_stop, &e);
    if (!flows || !e.sched) {
        fc_emu_fail(&e, "out of memory");
    } else {
        for (int i = 0; i < l->nchannels; i++) {
            flows[i] = (channel_flow){&e, &l->channels[i]};
            if (!fc_task_spawn(e.sched, NULL, run_channel, &flows[i])) fc_emu_fail(&e, "out of memory");
        }
        if (!fc_emu_failed(&e)) fc_sched_run(e.sched);
    }
    fc_sched_free(e.sched);
    free(flows);
    if (fc_emu_failed(&e)) {
        /* The peers and NCCL's proxy now wait for steps that will never come:
         * stop here, loudly, rather than hang. */
        fc_log_fatal_config("NCCL kernel emulation failed (NCCL %s, kernel %s, rank %d of %d): %s", l->rel->version,
                            l->kernel, l->rank, l->nRanks, e.error);
        abort();
    }
}
