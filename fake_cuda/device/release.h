/* Which NCCL release this process runs, and so which layout (layout.h)
 * its kernel launches are decoded with. */
#ifndef NCCLSIM_DEVICE_RELEASE_H
#define NCCLSIM_DEVICE_RELEASE_H

#include "layout.h"

/* The NCCL release of this process (NULL when unsupported or not found; the
 * error line is printed once). Looked up once, at the first NCCL launch. */
const fc_nccl_release *fc_nccl_release_current(void);
/* The table entry for an ncclGetVersion code, NULL when not in the table. */
const fc_nccl_release *fc_nccl_release_find(int code);

#endif
