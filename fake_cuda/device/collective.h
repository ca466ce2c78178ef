/* One collective work item (ncclDevWorkColl) on one channel, as the
 * algorithms of ring.c and tree.c see it: this channel's part of the data
 * (NCCL's ncclCollCbdPart), the reduction operator, and the primitives of
 * the protocol the device function names. */
#ifndef NCCLSIM_DEVICE_COLLECTIVE_H
#define NCCLSIM_DEVICE_COLLECTIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "emu_state.h"
#include "int_math.h"
#include "prims.h"

typedef struct fc_coll {
    fc_emu *e;
    fc_task *t;
    const fc_nccl_channel *ch;
    const fc_nccl_func *func;
    const fc_nccl_work *w;
    fc_redop op;
    size_t esz;
    char who[120]; /* "rank 3 channel 2 AllReduce_Sum_f32_RING_LL", for messages */
} fc_coll;

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ncclCollCbdPart: the whole count and this channel's part of it (elements). */
void fc_coll_part(const fc_coll *c, int64_t *count, int64_t *partOffset, int64_t *partCount, int64_t *chunkCount);
/* ProtoSimple<CHUNKSTEPS/SLICESTEPS, SLICESTEPS> of a collective, or LL/LL128. */
fc_prims_cfg fc_coll_cfg(const fc_coll *c, int chunkSteps, int sliceSteps);
/* Primitives from the ring's previous rank to its next. */
bool fc_coll_ring_prims(fc_coll *c, fc_prims *p, int chunkSteps, int sliceSteps);
/* The groups of warps a kernel splits its block into (reduce up and
 * broadcast down, scatter and gather, ...), each as its own flow: fn runs on
 * a copy of c whose task is the flow's and whose `who` names the role
 * ("... (reduce up)"); returns when all have. */
typedef void (*fc_coll_role_fn)(fc_coll *c, int role);
void fc_coll_run_roles(fc_coll *c, fc_coll_role_fn fn, const int *roles, const char *const *names, int n);
/* ring->userRanks[0..nRanks), read once per work rather than per chunk;
 * [0] is this rank, [1] the next, [nRanks-1] the previous. NULL: failed
 * (said why); the caller frees it. */
int32_t *fc_coll_ring_user_ranks(const fc_coll *c);

#endif
