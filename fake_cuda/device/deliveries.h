/* Steps delivered straight into their reader's output (NVLS).
 *
 * A head's multicast store puts each step into every GPU's copy of its
 * buffer, and each GPU's gather then copies the step from there into its
 * output: for a 128 MiB AllReduce on 8 GPUs of a host the store writes the
 * result once and the gathers read it 8 times and write it 8 times. The data
 * of a step lands at the same element of every GPU's output, and the storing
 * role knows which (NCCL's kernels compute both from the same loop). So a
 * gather offers its output on the host's delivery board, for the steps of
 * its connection that this collective takes; a store that finds the offer
 * writes the step straight there and leaves a mark in the slot instead of
 * the data, and the gather, finding the mark, copies nothing. A step whose
 * reader made no offer (not yet, or a reader that never does) goes through
 * the slot as before.
 *
 * Offers are named by the key of the gather's buffer (fc_sim_memory_where),
 * which the store computes alike for its member's copy. An offer covers the
 * steps [first, end) of the connection and is withdrawn when the gather has
 * read the last of them, before its kernel ends: no store of another
 * collective (steps past `end`) or of a later communicator can match it.
 * Its entry goes back to the board then, for the offers of communicators
 * to come.
 * The board is a file every process of a host maps (NCCLSIM_DELIVERY_BOARD,
 * in the run directory); when unset, it is private to the process (its GPUs
 * deliver among themselves). */
#ifndef NCCLSIM_DEVICE_DELIVERIES_H
#define NCCLSIM_DEVICE_DELIVERIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device_link.h" /* fc_mem_ref */

/* A gather's output as offers name it: the bytes from `out` to the end of
 * its allocation. False when other processes cannot reach them. */
typedef struct {
    fc_mem_ref ref;
    uint64_t bytes;
} fc_delivery_output;
bool fc_delivery_output_at(uintptr_t out, fc_delivery_output *o);

/* The gather of the connection whose buffer is named `key` wants the steps
 * [first, end) at their element of `out`. False when the board has no room:
 * the steps then come through the slot. */
bool fc_delivery_offer(uint64_t key, uint64_t first, uint64_t end, const fc_delivery_output *out);
void fc_delivery_withdraw(uint64_t key);

/* Where step `step` of the connection named `key` goes when it lands at byte
 * `at` of its reader's output and is `bytes` long: writable in this process
 * until fc_mem_ref_release(*hold). NULL when no offer covers it. */
void *fc_delivery_open(uint64_t key, uint64_t step, size_t at, size_t bytes, void **hold);

/* The mark a delivered step leaves in its slot (the slot holds at least
 * FC_DELIVERY_MARK_BYTES), and reading it back: true when the slot holds
 * the mark of `step`, with where the data went and how much of it. */
#define FC_DELIVERY_MARK_BYTES 40
void fc_delivery_mark(void *slot, uint64_t step, int64_t outIx, uint64_t bytes);
bool fc_delivery_marked(const void *slot, uint64_t step, int64_t *outIx, uint64_t *bytes);

#endif
