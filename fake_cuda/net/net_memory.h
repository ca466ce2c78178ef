/* The driver's name for the bytes at an address (libcuda.so.1's
 * ncclsim_memory_where): the key every process of the host computes alike,
 * for the time board and the wake board. */
#ifndef NCCLSIM_NET_MEMORY_H
#define NCCLSIM_NET_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

/* The driver is loaded and names memory. */
bool fcn_memory_named(void);
/* The key of the bytes at `data`; 0 when no simulated memory holds them. */
uint64_t fcn_memory_key(const void *data);

#endif
