/* The device side of NCCL, emulated: each NCCL kernel launch is replayed on
 * the CPU, in its stream, by flows (tasks.h) that run what the kernel's blocks
 * run — the algorithm of every work item (algorithms.h) over the protocol
 * primitives (prims.h). The launch completes in its stream when every flow
 * has, so events and host functions after it wait for its data. */
#ifndef NCCLSIM_DEVICE_EMULATION_H
#define NCCLSIM_DEVICE_EMULATION_H

#include <stdbool.h>
#include <stdint.h>

#include "decode.h"

struct fc_emu {
    fc_nccl_launch *l;
    const fc_nccl_layout *L;
    volatile uint32_t *abortFlag;
    bool timed; /* modelled time: each step costs what it would on the simulated hardware */
    bool no_payload; /* steps move no data (payload.h) */
    char error[300]; /* first failure; a failed emulation stops */
};
typedef struct fc_emu fc_emu;

void fc_emu_fail(fc_emu *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline bool fc_emu_failed(const fc_emu *e) { return e->error[0] != 0; }
/* Failed, or NCCL's abort flag is set: every flow stops. */
static inline bool fc_emu_stopped(const fc_emu *e)
{
    return fc_emu_failed(e) || (e->abortFlag && __atomic_load_n(e->abortFlag, __ATOMIC_ACQUIRE));
}

/* Replay a resolved launch to its end (in its stream). */
void fc_emu_run(fc_nccl_launch *l);

#endif
