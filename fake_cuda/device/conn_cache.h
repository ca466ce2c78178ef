/* The connections a thread's kernels set up, kept across launches.
 *
 * Setting up a connection checks that its buffer, head, tail and FIFO are
 * simulated memory and finds the multicast team behind an NVLS buffer and
 * its credits: registry and multicast lookups under the driver's locks, and
 * an NVLS collective on 16 channels sets up some 400 connections per GPU
 * and operation. A kept connection is used again while what the kernel
 * reads of it (its ncclConnInfo's fields) is unchanged and no memory of the
 * process went away since (fc_sim_memory_generation): the answers of those
 * lookups cannot have changed. Within one launch the fields cannot change
 * either (NCCL sets connections up between its kernels): the check of a
 * launch's connections before it runs (resolve.c) vouches for them when its
 * flows set them up. A multicast team's member that binds other memory
 * while this process keeps its mapping is seen at the next set-up only;
 * NCCL binds its NVLS buffers once per communicator, and the
 * communicator's end unmaps them here too. */
#ifndef NCCLSIM_DEVICE_CONN_CACHE_H
#define NCCLSIM_DEVICE_CONN_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "prims.h"

/* What a kernel reads of an ncclConnInfo at `at` for one protocol. */
typedef struct {
    uintptr_t at, buff, head, tail, fifo;
    int32_t stepSize;
} fc_conn_fields;

fc_conn_fields fc_conn_fields_at(const fc_nccl_layout *L, uintptr_t at, int proto);

typedef struct {
    uintptr_t peer_slot;   /* where the channel points at the peer's ncclChannelPeer */
    unsigned which;        /* send or receive, connIndex, protocol */
    fc_conn_fields fields; /* as they were when it was set up */
    uint64_t generation;   /* fc_sim_memory_generation then */
    uint64_t checked_in;   /* the launch (serial) that last found it unchanged */
    fc_conn conn;
} fc_conn_kept;

/* The connection send[connIndex] / recv[connIndex] towards `peer` on
 * channel ch in `proto` as kept, when the channel still points at the same
 * ncclConnInfo, its fields are as kept, and no memory went away since (what
 * was read is then still simulated memory); NULL otherwise. */
const fc_conn_kept *fc_conn_cache_lookup(const fc_nccl_launch *l, const fc_nccl_channel *ch, int peer, bool send,
                                         int connIndex, int proto);
/* Keep a connection just set up: every check passed after memory was at
 * `generation` (read before the first check). */
void fc_conn_cache_keep(const fc_nccl_channel *ch, int peer, bool send, int connIndex, int proto,
                        const fc_conn_fields *fields, uint64_t generation, const fc_conn *c);

#endif
