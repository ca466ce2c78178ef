/* The names of NCCL's device-function parts (names.h). */
#include "names.h"

#include <string.h>

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

typedef struct {
    char *out;
    size_t n, len; /* out holds len bytes, room for n - 1 */
} name_buf;

static void put_str(name_buf *b, const char *s)
{
    while (*s && b->len + 1 < b->n) b->out[b->len++] = *s++;
}

static void put_int(name_buf *b, int v)
{
    char digits[12];
    int k = 0;
    unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
    do digits[k++] = (char)('0' + u % 10); while (u /= 10);
    if (v < 0) digits[k++] = '-';
    while (k && b->len + 1 < b->n) b->out[b->len++] = digits[--k];
}

void fc_flow_name(char *out, size_t n, int rank, int channel, const char *what, int peer)
{
    if (!n) return;
    name_buf b = {out, n, 0};
    put_str(&b, "rank ");
    put_int(&b, rank);
    put_str(&b, " channel ");
    put_int(&b, channel);
    put_str(&b, " ");
    put_str(&b, what);
    if (peer >= 0) {
        put_str(&b, " ");
        put_int(&b, peer);
    }
    out[b.len] = 0;
}

void fc_flow_name_add_role(char *name, size_t n, const char *role)
{
    size_t len = strlen(name);
    if (len + strlen(role) + 4 > n) return; /* " (", ")" and the end */
    name_buf b = {name, n, len};
    put_str(&b, " (");
    put_str(&b, role);
    put_str(&b, ")");
    name[b.len] = 0;
}
