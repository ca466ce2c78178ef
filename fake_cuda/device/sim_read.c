/* Reads of fields and of simulated memory (see sim_read.h). */
#include "sim_read.h"

#include <string.h>

#include "device_link.h"

/* Walks adjacent registered ranges, so a structure that straddles two VMM
 * mappings of one reservation still reads. */
static bool sim_span(uintptr_t addr, size_t n, void *dst)
{
    while (n) {
        size_t avail = addr ? fc_sim_memory_span(addr) : 0;
        if (!avail) return false;
        size_t take = n < avail ? n : avail;
        if (dst) {
            memcpy(dst, (const void *)addr, take); /* device memory is identity mapped */
            dst = (char *)dst + take;
        }
        addr += take;
        n -= take;
    }
    return true;
}

bool fc_nccl_read(uintptr_t addr, void *dst, size_t n) { return sim_span(addr, n, dst); }
bool fc_nccl_in_sim_memory(uintptr_t addr, size_t n) { return sim_span(addr, n ? n : 1, NULL); }
