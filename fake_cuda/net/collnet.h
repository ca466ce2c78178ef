/* CollNet (collnet.c): the in-network reduction behind ncclCollNetPlugin_v8
 * (net_versions.c adapts its vtable). Types and operators are numbered as
 * ncclDataType_t and ncclRedOp_t. */
#ifndef NCCLSIM_NET_COLLNET_H
#define NCCLSIM_NET_COLLNET_H

#include <stdbool.h>
#include <stddef.h>

#include "net_types.h"

/* Every NIC when the host's fabric reduces in the network ([platform]
 * collnet = 1), none otherwise. */
ncclResult_t fcn_collnet_devices(int *ndev);
ncclResult_t fcn_collnet_reduce_support(int type, int op, int *supported);
/* One member per host: blocks until every member is connected. */
ncclResult_t fcn_collnet_connect(void *handles[], int nranks, int rank, void *listen_comm, void **coll);
ncclResult_t fcn_collnet_close(void *coll);
ncclResult_t fcn_collnet_iallreduce(void *coll, void *send, void *recv, size_t count, int type, int op,
                                    void **request);
/* A window [off, off + bytes) of the vector of every member's bytesPerRank:
 * AllGather gives every member the whole window (send: this member's part
 * of it), ReduceScatter each member its part reduced (send: the window). */
ncclResult_t fcn_collnet_iallgather(void *coll, void *send, void *recv, size_t bytesPerRank, size_t off,
                                    size_t bytes, void **request);
ncclResult_t fcn_collnet_ireducescatter(void *coll, void *send, void *recv, size_t bytesPerRank, size_t off,
                                        size_t bytes, int type, int op, void **request);
ncclResult_t fcn_collnet_test(void *request, int *done, int *size);

#endif
