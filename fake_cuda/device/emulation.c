/* Replaying an NCCL kernel launch (see emulation.h): one flow per CUDA block
 * (channel) runs its batches in order; flows of one launch share a scheduler
 * on the stream's worker thread. */
#include "emulation.h"

#include <stdlib.h>

#include "algorithms.h"
#include "device_link.h"
#include "emu_state.h"
#include "log.h"
#include "payload.h"
#include "stand_in.h"
#include "tasks.h"
#include "timeline.h"

typedef struct {
    fc_emu *e;
    const fc_nccl_channel *ch;
} channel_flow;

/* The host side's view of a channel's progress, written as the kernel does:
 * FIFO space (<= 2.26: before a batch runs, once loaded), the work counter
 * (2.26+: started/completed per batch; written back to the channel at the
 * end). The profiler's per-event records of 2.27+ are left out: they are
 * only read by a profiler plugin. */
static void put_u32(uintptr_t array, int i, uint32_t v)
{
    if (array && fc_nccl_in_sim_memory(array + (uintptr_t)i * 4, 4))
        __atomic_store_n((volatile uint32_t *)array + i, v, __ATOMIC_RELEASE);
}
static void put_u64(uintptr_t array, int i, uint64_t v)
{
    if (array && fc_nccl_in_sim_memory(array + (uintptr_t)i * 8, 8))
        __atomic_store_n((volatile uint64_t *)array + i, v, __ATOMIC_RELEASE);
}

static void run_channel(fc_task *t, void *arg)
{
    channel_flow *f = arg;
    const fc_nccl_launch *l = f->e->l;
    const fc_nccl_layout *L = f->e->L;
    const fc_nccl_channel *ch = f->ch;
    /* 2.26.2 reports every batch; later releases only to a profiler */
    bool counters = L->coll_profilerEnabled.off < 0 && !L->MAX_PROFILER_EVENTS_PER_CHANNEL;
    uint64_t counter = 0;
    uintptr_t counterAt = L->channel_workCounter.off >= 0 ? ch->dev + (uintptr_t)L->channel_workCounter.off : 0;
    if (counterAt) fc_nccl_read(counterAt, &counter, 8);
    for (int i = 0; i < ch->nbatches && !fc_emu_failed(f->e); i++) {
        const fc_nccl_batch *b = &l->batches[ch->first_batch + i];
        if (l->storage == 1) put_u32(l->workConsumed, ch->id, b->consumed);
        counter += (uint64_t)b->nworks;
        if (counters) put_u64(l->workStarted, ch->id, counter);
        fc_algo_run_batch(f->e, t, ch, b);
        if (counters) put_u64(l->workCompleted, ch->id, counter);
    }
    if (counterAt && !fc_emu_failed(f->e)) put_u64(counterAt, 0, counter);
}

static bool should_stop(void *arg) { return fc_emu_stopped(arg); }

void fc_emu_run(fc_nccl_launch *l)
{
    fc_emu e = {.l = l, .L = l->rel->layout};
    if (l->abortFlag && fc_nccl_in_sim_memory(l->abortFlag, 4)) e.abortFlag = (volatile uint32_t *)l->abortFlag;
    channel_flow flows[64]; /* a channel per set bit of the 64-bit channelMask (decode.c) */
    fc_sched *sched = fc_sched_new(should_stop, &e);
    if (!sched) {
        fc_emu_fail(&e, "out of memory");
    } else {
        e.timed = fc_time_modelled();
        e.no_payload = fc_no_payload();
        uint64_t start = fc_time_kernel_start();
        fc_sched_set_start(sched, start);
        uintptr_t *inputs = e.no_payload ? NULL : fc_stand_in_inputs(l);
        for (int i = 0; i < l->nchannels; i++) {
            flows[i] = (channel_flow){&e, &l->channels[i]};
            if (!fc_task_spawn(sched, NULL, run_channel, &flows[i])) fc_emu_fail(&e, "out of memory");
        }
        if (!fc_emu_failed(&e)) fc_sched_run(sched);
        fc_stand_in_restore(l, inputs);
        uint64_t end = fc_sched_end(sched); /* the kernel ends with its last channel */
        fc_time_op_end(end);
        if (e.timed && !fc_emu_failed(&e)) fc_timeline_kernel(l, start, end);
    }
    fc_sched_free(sched);
    if (fc_emu_failed(&e)) {
        /* The peers and NCCL's proxy now wait for steps that will never come:
         * stop here, loudly, rather than hang. */
        fc_log_fatal_config("NCCL kernel emulation failed (NCCL %s, kernel %s, rank %d of %d): %s", l->rel->version,
                            l->kernel, l->rank, l->nRanks, e.error);
        abort();
    }
}
