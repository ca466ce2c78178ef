/* The names of NCCL's device-function parts (layout.h's enums), as NCCL's own
 * enum names spell them: for traces and the timeline; and the name of a
 * flow of the emulated kernel, for its messages. */
#ifndef NCCLSIM_DEVICE_NAMES_H
#define NCCLSIM_DEVICE_NAMES_H

#include <stddef.h>

/* "" for a value outside the list. */
const char *fc_nccl_coll_name(int coll);
const char *fc_nccl_redop_name(int redop);
const char *fc_nccl_type_name(int type);
const char *fc_nccl_algo_name(int algo);
const char *fc_nccl_proto_name(int proto);

/* "rank <rank> channel <channel> <what>", and " <peer>" when peer >= 0, cut
 * to fit n bytes. Put together without printf: every flow of every launch
 * has one, and snprintf showed in profiles of small collectives. */
void fc_flow_name(char *out, size_t n, int rank, int channel, const char *what, int peer);
/* A flow's name `name` (in n bytes) followed by " (<role>)": the role of
 * the collective the flow plays, left out when it does not fit whole. */
void fc_flow_name_add_role(char *name, size_t n, const char *role);

#endif
