/* Reading what NCCL wrote: fields of a structure copied out of simulated
 * memory, found by the release's layout (layout.h), and simulated memory
 * itself (the driver's device and registered host memory). */
#ifndef NCCLSIM_DEVICE_SIM_READ_H
#define NCCLSIM_DEVICE_SIM_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "layout.h"

/* A field of a structure copied to `base` (absent field: 0). Inline, with a
 * load of the field's own size: a launch's decoding reads some hundred
 * fields, and a call with a copy of variable length each was a few percent
 * of a small collective's CPU time. */
static inline uint64_t fc_nccl_get(const void *base, fc_nccl_field f)
{
    if (f.off < 0) return 0;
    const char *p = (const char *)base + f.off;
    uint64_t v;
    switch (f.size) { /* little-endian, like the GPU */
    case 1: { uint8_t x; memcpy(&x, p, 1); v = x; break; }
    case 2: { uint16_t x; memcpy(&x, p, 2); v = x; break; }
    case 4: { uint32_t x; memcpy(&x, p, 4); v = x; break; }
    case 8: memcpy(&v, p, 8); break;
    default:
        if (f.size == 0 || f.size > 8) return 0;
        v = 0;
        memcpy(&v, p, f.size);
    }
    if (f.bits) {
        v >>= f.bit;
        if (f.bits < 64) v &= (1ull << f.bits) - 1;
    }
    return v;
}

/* Copy [addr, addr+n) of simulated memory (device or registered host) to dst;
 * false when any byte lies outside simulated memory. */
bool fc_nccl_read(uintptr_t addr, void *dst, size_t n);
/* Is [addr, addr+n) simulated memory? */
bool fc_nccl_in_sim_memory(uintptr_t addr, size_t n);

#endif
