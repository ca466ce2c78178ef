/* NCCLSIM_NO_PAYLOAD=1: NCCL's protocol runs as always (every step, credit,
 * LL flag and network message) but no data moves: the emulated kernels
 * neither read nor write the program's buffers nor reduce, and network
 * messages carry only the words that are not zero (the LL/LL128 flags), so a
 * collective of any size costs no memory beyond NCCL's own buffers and its
 * modelled time stays what its bytes would take. */
#ifndef NCCLSIM_PAYLOAD_H
#define NCCLSIM_PAYLOAD_H

#include <stdbool.h>

bool fc_no_payload(void);

#endif
