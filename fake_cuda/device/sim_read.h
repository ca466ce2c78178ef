/* Reading what NCCL wrote: fields of a structure copied out of simulated
 * memory, found by the release's layout (layout.h), and simulated memory
 * itself (the driver's device and registered host memory). */
#ifndef NCCLSIM_DEVICE_SIM_READ_H
#define NCCLSIM_DEVICE_SIM_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"

/* A field of a structure copied to `base` (absent field: 0). */
uint64_t fc_nccl_get(const void *base, fc_nccl_field f);
/* Copy [addr, addr+n) of simulated memory (device or registered host) to dst;
 * false when any byte lies outside simulated memory. */
bool fc_nccl_read(uintptr_t addr, void *dst, size_t n);
/* Is [addr, addr+n) simulated memory? */
bool fc_nccl_in_sim_memory(uintptr_t addr, size_t n);

#endif
