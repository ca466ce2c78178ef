/* Unwritten collective inputs read from zeros (stand_in.h). */
#include "stand_in.h"

#include <stdbool.h>
#include <stdlib.h>

#include "device_link.h"

/* Does the output share the input's range of memory? Then the launch
 * writes what it reads (in place, or an AllGather's own slice inside its
 * output), and the input is read where it is. */
static bool shares_range(uintptr_t in, uintptr_t out)
{
    if (!out) return false;
    return out >= in ? out - in < fc_sim_memory_span(in) : in - out < fc_sim_memory_span(out);
}

/* Only plain collectives: with registered buffers, peers reach the input
 * itself, and its work names more buffers than these two. */
static bool plain(const fc_nccl_work *w)
{
    return w->type == FC_NCCL_WORK_COLL && !w->coll.regUsed && !w->coll.netRegUsed && w->coll.sendbuff;
}

uintptr_t *fc_stand_in_inputs(fc_nccl_launch *l)
{
    uintptr_t *saved = NULL;
    uintptr_t last = 0, last_zero = 0; /* a launch's works mostly share their buffers: one question */
    for (int i = 0; i < l->nworks; i++) {
        fc_nccl_work *w = &l->works[i];
        if (!plain(w)) continue;
        uintptr_t in = w->coll.sendbuff;
        if (in != last) {
            last = in;
            last_zero = fc_zero_stand_in(in); /* first: a written input is answered from a table */
        }
        if (!last_zero || shares_range(in, w->coll.recvbuff)) continue;
        if (!saved && !(saved = calloc((size_t)l->nworks, sizeof *saved))) return NULL; /* nothing changed yet */
        saved[i] = in; /* 0: unchanged */
        w->coll.sendbuff = last_zero;
    }
    return saved;
}

void fc_stand_in_restore(fc_nccl_launch *l, uintptr_t *saved)
{
    if (!saved) return;
    for (int i = 0; i < l->nworks; i++)
        if (saved[i]) l->works[i].coll.sendbuff = saved[i];
    free(saved);
}
