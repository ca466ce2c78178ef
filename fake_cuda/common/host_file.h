/* Tables every process of a simulated host shares (the time board, the wake
 * board): a file in the host's part of the run directory, mapped shared. */
#ifndef NCCLSIM_COMMON_HOST_FILE_H
#define NCCLSIM_COMMON_HOST_FILE_H

#include <stddef.h>

/* The file at `path`, made `bytes` long (zeros) by the first process to
 * open it, mapped shared; NULL when it cannot be. Untouched pages cost no
 * memory. */
void *fc_host_file_map(const char *path, size_t bytes);

#endif
