/* Modelled time of the primitives' steps (NCCLSIM_CLOCK=model).
 *
 * A step starts on its flow's clock (tasks.h) once every slot it reads has
 * its data (the slot's ready time on the time board) and every slot it
 * writes is free again (the slot's free time); it takes the time its bytes
 * take on the simulated hardware; the slots it wrote are ready, and the slots
 * it read free, a hop's latency after its end (when it crossed a link), while
 * the flow goes on. The path of each slot follows from
 * whose memory it is: another GPU's (NVLink, or PCIe without NVLink between
 * them), the host's (PCIe), or this GPU's own (no link: a peer that reads it
 * pays, or the net plugin that sends it). */
#ifndef NCCLSIM_DEVICE_STEP_TIME_H
#define NCCLSIM_DEVICE_STEP_TIME_H

#include <stdint.h>

#include "prims.h"

/* A slot a step reads or writes: its address, and for a multicast address
 * the view of the team's copies (NULL otherwise). A multicast slot's data is
 * ready when every copy's is (a load-reduce reads them all) and free when
 * every copy is (a store writes them all). */
typedef struct {
    uintptr_t at;
    const fc_mc_view *mc;
    int peer; /* the connection's peer, for the timeline */
} fc_step_slot;

/* One step of p moving `bytes` of payload through each slot it reads (recv)
 * and writes (send). No-op unless the emulation is timed. */
void fc_step_time(fc_prims *p, const fc_step_slot *recv, int nrecv, const fc_step_slot *send, int nsend,
                  int64_t bytes);

#endif
