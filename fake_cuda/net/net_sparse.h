/* Messages without payload (payload.h): what travels is the message's
 * non-zero 8-byte words only, as runs {uint64 offset, uint64 bytes, bytes};
 * the receiver writes the runs and leaves the rest of its buffer as it is
 * (zero: without payload nothing else ever writes it). So LL and LL128 flags
 * arrive, and a Simple step, all zeros, costs a header. */
#ifndef NCCLSIM_NET_SPARSE_H
#define NCCLSIM_NET_SPARSE_H

#include <stdbool.h>
#include <stddef.h>

/* *buf (of *cap bytes) grown to hold need bytes; false when out of memory. */
bool fcn_sparse_room(char **buf, size_t *cap, size_t need);
/* The runs of data[0..size) into *buf (grown as needed, *cap its size);
 * returns their length, or (size_t)-1 when out of memory. */
size_t fcn_sparse_pack(const char *data, size_t size, char **buf, size_t *cap);
/* Write packed runs (len bytes) into data[0..size); false when they do not
 * fit (a corrupt message). */
bool fcn_sparse_unpack(const char *runs, size_t len, char *data, size_t size);

#endif
