/* The names of NCCL's device-function parts (layout.h's enums), as NCCL's own
 * enum names spell them: for traces and the timeline. */
#ifndef NCCLSIM_DEVICE_NAMES_H
#define NCCLSIM_DEVICE_NAMES_H

/* "" for a value outside the list. */
const char *fc_nccl_coll_name(int coll);
const char *fc_nccl_redop_name(int redop);
const char *fc_nccl_type_name(int type);
const char *fc_nccl_algo_name(int algo);
const char *fc_nccl_proto_name(int proto);

#endif
