/* NCCL's device algorithms, replayed over the emulated primitives (prims.h):
 * what RunWorkBatch / RunWorkColl of src/device/{all_reduce,all_gather,
 * reduce_scatter,broadcast,reduce,all_gather_v,sendrecv}.h do for each work
 * item, in the same order and with the same element counts, so every
 * connection takes the steps the host side planned for.
 *
 * Which device functions (collective x algorithm x protocol) are implemented
 * is one table in algorithms.c, read both by the check at launch and by the
 * dispatcher that runs each batch, so the two cannot disagree. */
#ifndef NCCLSIM_DEVICE_ALGORITHMS_H
#define NCCLSIM_DEVICE_ALGORITHMS_H

#include <stdbool.h>
#include <stddef.h>

#include "emu_state.h"
#include "tasks.h"

/* Why the decoded launch cannot be emulated (a device function outside the
 * table, or registered user buffers), written to why; false when it can.
 * Checked when the kernel is launched, so that the launch fails instead of
 * hanging later. */
bool fc_algo_unsupported(const fc_nccl_launch *l, char *why, size_t n);
/* Run one batch of a channel (a CUDA block's turn of its loop). */
void fc_algo_run_batch(fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const fc_nccl_batch *b);

/* ---- the implementations the table names ---- */

typedef struct fc_coll fc_coll; /* collective.h */

/* One work item of a collective on one channel. */
typedef void (*fc_algo_work_fn)(fc_coll *c);
void fc_allreduce_ring(fc_coll *c);     /* ring.c */
void fc_allgather_ring(fc_coll *c);     /* ring.c */
void fc_reducescatter_ring(fc_coll *c); /* ring.c */
void fc_broadcast_ring(fc_coll *c);     /* ring.c */
void fc_reduce_ring(fc_coll *c);        /* ring.c */
void fc_allreduce_tree(fc_coll *c);     /* tree.c */
void fc_allgather_pat(fc_coll *c);      /* pat.c */
void fc_reducescatter_pat(fc_coll *c);  /* pat.c */
void fc_allreduce_nvls(fc_coll *c);      /* nvls.c */
void fc_allreduce_nvls_tree(fc_coll *c); /* nvls.c */
void fc_allgather_nvls(fc_coll *c);      /* nvls.c */
void fc_reducescatter_nvls(fc_coll *c);  /* nvls.c */
void fc_allreduce_collnet_chain(fc_coll *c);  /* collnet.c */
void fc_allreduce_collnet_direct(fc_coll *c); /* collnet.c */
void fc_allgather_collnet_direct(fc_coll *c);     /* collnet.c */
void fc_reducescatter_collnet_direct(fc_coll *c); /* collnet.c */

/* A whole batch on one channel, for work that moves together. */
typedef void (*fc_algo_batch_fn)(fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const fc_nccl_batch *b);
void fc_allgatherv_batch(fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const fc_nccl_batch *b); /* allgatherv.c */
void fc_sendrecv_batch(fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const fc_nccl_batch *b);   /* sendrecv.c */

#endif
