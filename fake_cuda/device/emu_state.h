/* The state of one launch's emulation (emulation.h), which every flow and
 * algorithm shares: the launch, its NCCL release's layout, NCCL's abort flag,
 * the clock's and payload's modes, and the first failure, after which every
 * flow stops. Kept apart from emulation.c, which runs the launch, so that
 * the algorithms it runs do not depend on it. */
#ifndef NCCLSIM_DEVICE_EMU_STATE_H
#define NCCLSIM_DEVICE_EMU_STATE_H

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

#endif
