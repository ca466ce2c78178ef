/* The driver's view of simulated memory, for the plugin (libcuda.so.1's
 * ncclsim_* functions, found with dlsym): the key every process of the
 * host computes alike for the same bytes (the time board, the wake board),
 * and references (common/mem_ref.h) with which a message between processes
 * of one machine names its bytes instead of carrying them. */
#ifndef NCCLSIM_NET_MEMORY_H
#define NCCLSIM_NET_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mem_ref.h"

/* The driver is loaded and names memory. */
bool fcn_memory_named(void);
/* The key of the bytes at `data`; 0 when no simulated memory holds them. */
uint64_t fcn_memory_key(const void *data);

/* Which processes can follow this one's references: those with the same
 * value (one kernel, one pid namespace, one user: /proc/<pid>/fd reaches
 * their files). 0 when the driver makes no references. */
uint64_t fcn_memory_reach(void);
/* A reference to [data, data+len); false when no file backs it all. */
bool fcn_memory_ref(const void *data, size_t len, fc_mem_ref *out);
/* The bytes a reference names, readable until fcn_memory_release(*hold);
 * NULL when they cannot be mapped. */
const void *fcn_memory_open(const fc_mem_ref *r, size_t len, void **hold);
void fcn_memory_release(void *hold);

#endif
