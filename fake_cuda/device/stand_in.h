/* A run of a launch reads collective inputs that nobody wrote from zeros
 * holding no memory (fc_zero_stand_in, device_link.h) instead of faulting
 * in pages of zeros: programs whose own kernels write their inputs (which
 * the simulated GPU does not run) leave them unwritten. Decided when the
 * launch runs, in stream order, so that copies queued before it count. */
#ifndef NCCLSIM_DEVICE_STAND_IN_H
#define NCCLSIM_DEVICE_STAND_IN_H

#include <stdint.h>

#include "decode.h"

/* Point the launch's unwritten inputs at their stand-ins. Returns what to
 * hand fc_stand_in_restore after the run: the works are kept for later
 * runs of the launch (a graph's replays), whose inputs may be written by
 * then. NULL: nothing changed (or no memory to remember it: then nothing
 * changes). */
uintptr_t *fc_stand_in_inputs(fc_nccl_launch *l);
void fc_stand_in_restore(fc_nccl_launch *l, uintptr_t *saved);

#endif
