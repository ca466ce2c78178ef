/* The device side of NCCL, emulated: each NCCL kernel launch is replayed on
 * the CPU, in its stream, by flows (tasks.h) that run what the kernel's blocks
 * run — the algorithm of every work item (algorithms.h) over the protocol
 * primitives (prims.h), sharing the launch's state (emu_state.h). The launch
 * completes in its stream when every flow has, so events and host functions
 * after it wait for its data. */
#ifndef NCCLSIM_DEVICE_EMULATION_H
#define NCCLSIM_DEVICE_EMULATION_H

#include "decode.h"

/* Replay a resolved launch to its end (in its stream). */
void fc_emu_run(fc_nccl_launch *l);

#endif
