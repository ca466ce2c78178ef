/* The table of what the emulation implements, and its two readers: the
 * check at launch and the dispatcher (see algorithms.h). */
#include "algorithms.h"

#include <stdio.h>

#include "collective.h"
#include "names.h"

typedef struct {
    int8_t coll, algo, proto;   /* the device function's name parts (layout.h); -1: not in the name */
    uint8_t workType;           /* FC_NCCL_WORK_*: the work items the function runs */
    fc_algo_work_fn run_work;   /* run on each work item of the batch in turn, */
    fc_algo_batch_fn run_batch; /* or on the batch as a whole */
} algorithm;

/* One row per protocol: the algorithms are written once over the primitives,
 * which implement LL, LL128 and Simple. */
#define ROW_(coll, algo, proto, work, per_work, per_batch) \
    {FC_NCCL_COLL_##coll, FC_NCCL_ALGO_##algo, FC_NCCL_PROTO_##proto, FC_NCCL_WORK_##work, per_work, per_batch}
#define EACH_PROTO_(coll, algo, work, per_work, per_batch)                                                \
    ROW_(coll, algo, LL, work, per_work, per_batch), ROW_(coll, algo, LL128, work, per_work, per_batch), \
    ROW_(coll, algo, SIMPLE, work, per_work, per_batch)

static const algorithm algorithms[] = {
    EACH_PROTO_(AllReduce, RING, COLL, fc_allreduce_ring, NULL),
    EACH_PROTO_(AllReduce, TREE, COLL, fc_allreduce_tree, NULL),
    EACH_PROTO_(AllGather, RING, COLL, fc_allgather_ring, NULL),
    EACH_PROTO_(ReduceScatter, RING, COLL, fc_reducescatter_ring, NULL),
    EACH_PROTO_(Broadcast, RING, COLL, fc_broadcast_ring, NULL),
    EACH_PROTO_(Reduce, RING, COLL, fc_reduce_ring, NULL),
    /* 2.29+: ncclBroadcast's batched form */
    EACH_PROTO_(AllGatherV, RING, BCAST, NULL, fc_allgatherv_batch),
    /* one GPU per host; Simple only */
    ROW_(AllGather, PAT, SIMPLE, COLL, fc_allgather_pat, NULL),
    ROW_(ReduceScatter, PAT, SIMPLE, COLL, fc_reducescatter_pat, NULL),
    /* NVLink SHARP: GPUs on NVSwitches with multicast; Simple only; NVLS
     * within one host and across hosts through CollNet; NVLSTree across hosts */
    ROW_(AllReduce, NVLS, SIMPLE, COLL, fc_allreduce_nvls, NULL),
    ROW_(AllGather, NVLS, SIMPLE, COLL, fc_allgather_nvls, NULL),
    ROW_(ReduceScatter, NVLS, SIMPLE, COLL, fc_reducescatter_nvls, NULL),
    ROW_(AllReduce, NVLS_TREE, SIMPLE, COLL, fc_allreduce_nvls_tree, NULL),
    /* in-network reduction (a CollNet plugin); Simple only */
    ROW_(AllReduce, COLLNET_CHAIN, SIMPLE, COLL, fc_allreduce_collnet_chain, NULL),
    ROW_(AllReduce, COLLNET_DIRECT, SIMPLE, COLL, fc_allreduce_collnet_direct, NULL),
    ROW_(AllGather, COLLNET_DIRECT, SIMPLE, COLL, fc_allgather_collnet_direct, NULL),
    ROW_(ReduceScatter, COLLNET_DIRECT, SIMPLE, COLL, fc_reducescatter_collnet_direct, NULL),
    /* the function names no algorithm or protocol; each work item says LL or Simple */
    {FC_NCCL_COLL_SendRecv, -1, -1, FC_NCCL_WORK_P2P, NULL, fc_sendrecv_batch},
};

/* The row of a batch's device function and work type, NULL when none. */
static const algorithm *find(const fc_nccl_batch *b)
{
    const fc_nccl_func *f = b->func;
    if (!f) return NULL;
    for (size_t i = 0; i < sizeof algorithms / sizeof algorithms[0]; i++) {
        const algorithm *a = &algorithms[i];
        if (a->coll == f->coll && a->algo == f->algo && a->proto == f->proto && a->workType == b->workType)
            return a;
    }
    return NULL;
}

/* ---- the check at launch ---- */

/* Registered user buffers (IPC or network registration): the work then
 * names peers' buffers directly, which the emulation does not implement. */
static bool uses_registered_buffers(const fc_nccl_batch *b, const fc_nccl_work *w)
{
    if (b->workType == FC_NCCL_WORK_P2P)
        return w->p2p.sendIpcReg || w->p2p.recvIpcReg || w->p2p.sendNetReg || w->p2p.recvNetReg;
    if (b->workType == FC_NCCL_WORK_COLL) return w->coll.regUsed || w->coll.netRegUsed;
    return false;
}

bool fc_algo_unsupported(const fc_nccl_launch *l, char *why, size_t n)
{
    for (int i = 0; i < l->nbatches; i++) {
        const fc_nccl_batch *b = &l->batches[i];
        const char *name = b->func ? b->func->name : "?";
        if (!find(b)) {
            snprintf(why, n, "%s (%s work)", name,
                     b->workType == FC_NCCL_WORK_COLLREG ? "registered-buffer"
                     : b->workType == FC_NCCL_WORK_BCAST ? "batched broadcast"
                                                         : "collective");
            return true;
        }
        for (int k = 0; k < b->nworks; k++) {
            const fc_nccl_work *w = &l->works[b->first_work + k];
            if (!uses_registered_buffers(b, w)) continue;
            if (b->workType == FC_NCCL_WORK_P2P) snprintf(why, n, "send/receive with registered user buffers");
            else snprintf(why, n, "%s with registered user buffers", name);
            return true;
        }
    }
    return false;
}

/* ---- the dispatcher ---- */

/* One collective work item: its operator and element size, then the algorithm. */
static void run_coll(fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const fc_nccl_batch *b, const fc_nccl_work *w,
                     fc_algo_work_fn run)
{
    const fc_nccl_func *f = b->func;
    fc_coll c = {.e = e, .t = t, .ch = ch, .func = f, .w = w};
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
    fc_flow_name(c.who, sizeof c.who, e->l->rank, ch->id, f->name, -1);
    run(&c);
}

void fc_algo_run_batch(fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const fc_nccl_batch *b)
{
    const algorithm *a = find(b);
    if (!a) { /* refused at launch */
        fc_emu_fail(e, "rank %d channel %d: %s is not emulated", e->l->rank, ch->id, b->func ? b->func->name : "?");
        return;
    }
    if (a->run_batch) {
        a->run_batch(e, t, ch, b);
        return;
    }
    for (int i = 0; i < b->nworks && !fc_emu_failed(e); i++)
        run_coll(e, t, ch, b, &e->l->works[b->first_work + i], a->run_work);
}
