/* The modelled run's timeline (NCCLSIM_TIMELINE=<path with %p>, written only
 * with the modelled clock): one JSON line per event, a Chrome trace event
 * without its "pid" (the report adds the rank), in microseconds since the
 * run's clock epoch:
 *   kernel  every NCCL kernel: its stream (tid 1 + stream id), collective,
 *           algorithm, protocol, element count and rank;
 *   step    with NCCLSIM_TIMELINE_STEPS=1, every step of every connection
 *           (tid 1000 + channel), the first FC_TIMELINE_MAX_STEPS of them:
 *           a note records where they were cut. */
#ifndef NCCLSIM_DEVICE_TIMELINE_H
#define NCCLSIM_DEVICE_TIMELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "decode.h"

#define FC_TIMELINE_MAX_STEPS 200000 /* per process: ~30 MB of lines */

/* A kernel that ran from start to end (modelled ns since the epoch). */
void fc_timeline_kernel(const fc_nccl_launch *l, uint64_t start, uint64_t end);

/* Are steps recorded? */
bool fc_timeline_steps(void);
/* One step on a channel: the peers it received from and sent to. */
void fc_timeline_step(const fc_nccl_launch *l, int channel, int proto, const int *from, int nfrom, const int *to,
                      int nto, uint64_t start, uint64_t end, int64_t bytes);

#endif
