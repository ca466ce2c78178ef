/* The names of NCCL's device-function parts (names.h). */
#include "names.h"

#include "layout.h"

#define FC_NCCL_NAME_(n) #n,
static const char *const colls[] = {FC_NCCL_COLLS(FC_NCCL_NAME_)};
static const char *const redops[] = {FC_NCCL_REDOPS(FC_NCCL_NAME_)};
static const char *const types[] = {FC_NCCL_TYPES(FC_NCCL_NAME_)};
static const char *const algos[] = {FC_NCCL_ALGOS(FC_NCCL_NAME_)};
static const char *const protos[] = {FC_NCCL_PROTOS(FC_NCCL_NAME_)};
#undef FC_NCCL_NAME_

static const char *name_of(const char *const *names, int n, int i) { return i >= 0 && i < n ? names[i] : ""; }

const char *fc_nccl_coll_name(int coll) { return name_of(colls, FC_NCCL_NUM_COLLS, coll); }
const char *fc_nccl_redop_name(int redop) { return name_of(redops, FC_NCCL_NUM_REDOPS, redop); }
const char *fc_nccl_type_name(int type) { return name_of(types, FC_NCCL_NUM_TYPES, type); }
const char *fc_nccl_algo_name(int algo) { return name_of(algos, FC_NCCL_NUM_ALGOS, algo); }
const char *fc_nccl_proto_name(int proto) { return name_of(protos, FC_NCCL_NUM_PROTOS, proto); }
