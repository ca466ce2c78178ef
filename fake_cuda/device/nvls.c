/* NVLS and NVLSTree (NVLink SHARP): RunWorkColl of all_reduce.h,
 * all_gather.h and reduce_scatter.h for NCCL_ALGO_NVLS / NCCL_ALGO_NVLS_TREE,
 * protocol Simple.
 *
 * Every GPU of a host joins one multicast team. For each head h (a GPU; on
 * one host every GPU is one) and channel, NCCL sets up four connections to the
 * pseudo-peer nRanks+1+h: scatter (send[1]) and gather (recv[1]) through this
 * GPU's own unicast buffers, and on the head a reduce (recv[0]) and a
 * broadcast (send[0]) through the multicast addresses of the same buffers.
 * The head's reduce reads the team's sum of what every GPU scattered to it
 * (multimem.ld_reduce) and its broadcast stores into every GPU's buffer at
 * once (multimem.st); the credits of those connections are multicast too, so
 * a head waits for the slowest GPU and one store releases them all. Across
 * hosts the heads' shares meet over the network: NVLSTree reduces them up and
 * broadcasts down a tree of hosts; NVLS proper hands them to CollNet. The
 * primitives (prims.h) do the multicast part; here are the roles and the
 * element ranges of each, as the kernels compute them. Each role is its own
 * group of warps on the GPU and its own flow here. */
#include "algorithms.h"
#include "collective.h"
#include "rails.h"

enum { SCATTER, GATHER, REDUCE, BCAST };
static const char *const role_names[] = {"scatter", "gather", "reduce", "broadcast"};

/* The loop of the AllReduce roles over this channel's part: nHeads chunks per
 * turn, head h taking the h-th; the last turn's chunks are cut evenly,
 * aligned to `lastAlign` bytes (NVLS: 16 KiB, NVLSTree: 16 B). */
typedef struct {
    int64_t gridOffset, channelCount, chunk, last;
    int nHeads;
} allreduce_loop;

static allreduce_loop allreduce_loop_of(const fc_coll *c, int64_t lastAlign)
{
    allreduce_loop L;
    int64_t count;
    fc_coll_part(c, &count, &L.gridOffset, &L.channelCount, &L.chunk);
    L.nHeads = c->ch->nvls.nHeads;
    int64_t loop = L.nHeads * L.chunk;
    int64_t rem = loop ? (int32_t)(L.channelCount % loop) : 0; /* an int in the kernel */
    int64_t align = lastAlign / (int64_t)c->esz;
    L.last = div_up(div_up(rem, L.nHeads), align) * align;
    return L;
}

/* A role's primitives. Every reader of NVLS buffers is one of the roles
 * (through multicast, or a gather), so large steps may be notes (prims.h). */
static bool role_prims(fc_coll *c, fc_prims *p, const int *recv, int nrecv, const int *send,
                       int nsend, int connIndexRecv, int connIndexSend)
{
    fc_prims_cfg cfg = {.proto = FC_NCCL_PROTO_SIMPLE, .slicePerChunk = 1, .stepPerSlice = 1,
                        .connIndexRecv = connIndexRecv, .connIndexSend = connIndexSend, .notes = true};
    return fc_prims_init(p, c->e, c->t, c->ch, c->who, &cfg, recv, nrecv, send, nsend, c->w->coll.sendbuff,
                         c->w->coll.recvbuff, c->op);
}

static const int no_peer = -1;

/* ---- AllReduce (NVLS on one host, NVLSTree across hosts) ---- */

static void allreduce_role(fc_coll *c, int role, bool tree)
{
    const fc_nccl_channel *ch = c->ch;
    allreduce_loop L = allreduce_loop_of(c, tree ? 16 : 16384);
    int64_t loop = L.nHeads * L.chunk, chunk = L.chunk;
    fc_prims p;
    bool ok;
    const int *down = tree ? ch->nvls.treeDown : &ch->nvls.down;
    int ndown = tree ? 3 : 1;
    bool hasUp = tree && ch->nvls.treeUp >= 0;
    switch (role) {
    case SCATTER: ok = role_prims(c, &p, &no_peer, 0, ch->nvls.up, L.nHeads, 1, 1); break;
    case GATHER: ok = role_prims(c, &p, ch->nvls.up, L.nHeads, &no_peer, 0, 1, 1); break;
    case REDUCE: ok = role_prims(c, &p, down, ndown, hasUp ? &ch->nvls.treeUp : down, hasUp ? 1 : ndown, 0, 0); break;
    default: ok = role_prims(c, &p, &ch->nvls.treeUp, 1, down, ndown, 0, 0); break; /* BCAST */
    }
    if (!ok) return;
    if (role == GATHER) fc_prims_offer_output(&p, loop ? div_up(L.channelCount, loop) : 0);
    for (int64_t elemOffset = 0; elemOffset < L.channelCount; elemOffset += loop) {
        if (L.channelCount - elemOffset < loop) chunk = L.last;
        int64_t offset = L.gridOffset + elemOffset;
        if (role == SCATTER || role == GATHER) {
            int64_t nelem = min64(loop, L.channelCount - elemOffset);
            if (role == SCATTER) fc_prims_scatter(&p, offset, nelem, chunk, chunk, -1, 0);
            else fc_prims_gather(&p, offset, nelem, chunk, chunk, -1, 0, false);
        } else { /* directRecvDirectSend; what the head stores lands at chunkOffset of every output */
            int64_t chunkOffset = elemOffset + ch->nvls.headRank * chunk;
            int64_t nelem = min64(chunk, L.channelCount - chunkOffset);
            fc_prims_store(&p, true, FC_BUF_NONE, 0, L.gridOffset + chunkOffset, nelem);
        }
    }
    fc_prims_fini(&p);
}

/* NVLS across hosts without NVLSTree: each head reduces its share of the
 * host through the multicast buffers and sends it to the network (out, the
 * CollNet peer, connIndex 1), then broadcasts the network's result through
 * them (connIndex 0). Element ranges follow work->collnet. */
static void allreduce_collnet_role(fc_coll *c, int role)
{
    const fc_nccl_channel *ch = c->ch;
    const fc_nccl_work *w = c->w;
    int64_t bid = ch->id - w->coll.channelLo, nChannels = w->coll.channelHi - w->coll.channelLo + 1;
    int64_t chunk = w->coll.collnetChunkCount, size = (int64_t)w->coll.collnetCount;
    int nHeads = ch->nvls.nHeads;
    int64_t loop = nChannels * nHeads * chunk;
    fc_prims p;
    bool ok;
    switch (role) {
    case SCATTER: ok = role_prims(c, &p, &no_peer, 0, ch->nvls.up, nHeads, 1, 1); break;
    case GATHER: ok = role_prims(c, &p, ch->nvls.up, nHeads, &no_peer, 0, 1, 1); break;
    case REDUCE: ok = role_prims(c, &p, &ch->nvls.down, 1, &ch->nvls.out, 1, 0, 1); break;
    default: ok = role_prims(c, &p, &ch->nvls.out, 1, &ch->nvls.down, 1, 0, 0); break; /* BCAST */
    }
    if (!ok) return;
    if (role == GATHER) fc_prims_offer_output(&p, loop ? div_up(size, loop) : 0);
    for (int64_t gridOffset = 0; gridOffset < size; gridOffset += loop) {
        int64_t offset = gridOffset + bid * nHeads * chunk, nelem = min64(nHeads * chunk, size - offset);
        int64_t headOffset = gridOffset + (bid * nHeads + ch->nvls.headRank) * chunk;
        if (role == SCATTER) fc_prims_scatter(&p, offset, nelem, chunk, chunk, -1, 0);
        else if (role == GATHER) fc_prims_gather(&p, offset, nelem, chunk, chunk, -1, 0, false);
        else fc_prims_store(&p, true, FC_BUF_NONE, 0, headOffset, min64(chunk, size - headOffset));
    }
    fc_prims_fini(&p);
}

/* ---- AllGather and ReduceScatter (NVLS on one host) ---- */

/* AllGather: every GPU broadcasts its part through its head's multicast
 * buffer and gathers every head's; ReduceScatter: every GPU scatters the
 * heads' shares and its head reads the team's sum of its own. Head h's share
 * is the h-th `count` of the buffer. */
static void one_host_role(fc_coll *c, int role)
{
    const fc_nccl_channel *ch = c->ch;
    int64_t count, gridOffset, channelCount, chunk;
    fc_coll_part(c, &count, &gridOffset, &channelCount, &chunk);
    int nHeads = ch->nvls.nHeads;
    fc_prims p;
    bool ok;
    switch (role) {
    case GATHER: ok = role_prims(c, &p, ch->nvls.up, nHeads, &no_peer, 0, 1, 1); break;
    case SCATTER: ok = role_prims(c, &p, &no_peer, 0, ch->nvls.up, nHeads, 1, 1); break;
    case BCAST: ok = role_prims(c, &p, &no_peer, 0, &ch->nvls.down, 1, 0, 0); break;
    default: ok = role_prims(c, &p, &ch->nvls.down, 1, &no_peer, 0, 0, 0); break; /* REDUCE */
    }
    if (!ok) return;
    if (role == GATHER) fc_prims_offer_output(&p, chunk ? div_up(channelCount, chunk) : 0);
    for (int64_t elemOffset = 0; elemOffset < channelCount; elemOffset += chunk) {
        int64_t offset = gridOffset + elemOffset, nelem = min64(chunk, channelCount - elemOffset);
        switch (role) {
        case GATHER: fc_prims_gather(&p, offset, nHeads * count, nelem, count, -1, 0, false); break;
        case SCATTER: fc_prims_scatter(&p, offset, nHeads * count, nelem, count, -1, 0); break;
        case BCAST: /* into every GPU's buffer of this head, for its share of the output */
            fc_prims_store(&p, false, FC_BUF_INPUT, offset, offset + ch->nvls.headRank * count, nelem);
            break;
        default: FC_RECV(&p, offset, nelem, false); break;      /* the team's sum of this head's share */
        }
    }
    fc_prims_fini(&p);
}

/* ---- AllGather and ReduceScatter across hosts (NVLS with CollNet) ----
 * Every GPU is a head and the head of its rail (rails.h). AllGather: each
 * sends its part of a window to the network, stores the rail's window from
 * the network into its multicast buffer (every GPU's copy at once), and
 * gathers every rail's window from the GPUs' buffers into its output.
 * ReduceScatter: each scatters every rail's part of its input to that
 * rail's head, reads the team's sum of its own rail through the multicast
 * buffer and sends it to the network, and receives its part of the result. */

enum { NET_SEND = BCAST + 1, NET_RECV };
static const char *const rail_role_names[] = {"scatter", "gather", "reduce", "broadcast", "network send",
                                              "network receive"};

static void rails_role(fc_coll *c, int role)
{
    const fc_nccl_channel *ch = c->ch;
    int nHeads = ch->nvls.nHeads;
    fc_prims p;
    fc_rails r;
    bool ok;
    switch (role) {
    case GATHER: ok = role_prims(c, &p, ch->nvls.up, nHeads, &no_peer, 0, 1, 1); break;
    case SCATTER: ok = role_prims(c, &p, &no_peer, 0, ch->nvls.up, nHeads, 1, 1); break;
    case NET_SEND: ok = role_prims(c, &p, &no_peer, 0, &ch->nvls.out, 1, 1, 1); break;
    case NET_RECV: ok = role_prims(c, &p, &ch->nvls.out, 1, &no_peer, 0, 0, 0); break;
    case BCAST: ok = role_prims(c, &p, &ch->nvls.out, 1, &ch->nvls.down, 1, 0, 0); break;
    default: ok = role_prims(c, &p, &ch->nvls.down, 1, &ch->nvls.out, 1, 0, 1); break; /* REDUCE */
    }
    if (!ok || !fc_rails_init(&r, c, nHeads)) return; /* the emulation failed: said why */
    while (fc_rails_next(&r)) {
        int64_t own, n;
        fc_rails_own(&r, &own, &n);
        int64_t size = fc_rails_size(&r);
        /* gather and scatter: a connection per rail; broadcast and reduce:
         * the window as it is, through the multicast buffer */
        fc_rails_step s = {.r = &r, .rail0 = 0, .user = role == GATHER || role == SCATTER};
        switch (role) {
        case NET_SEND: FC_SEND(&p, own, n); break;
        case NET_RECV: FC_RECV(&p, own, n, true); break;
        case GATHER: fc_prims_process(&p, true, false, size, fc_rails_gather, &s); break;
        case BCAST: fc_prims_process(&p, true, true, size, fc_rails_gather, &s); break;
        case SCATTER: fc_prims_process(&p, false, true, size, fc_rails_scatter, &s); break;
        default: fc_prims_process(&p, true, true, size, fc_rails_scatter, &s); break; /* REDUCE */
        }
    }
    fc_prims_fini(&p);
    fc_rails_fini(&r);
}

/* ---- the roles as flows ---- */

static void role_run(fc_coll *c, int role)
{
    const fc_nccl_func *f = c->func;
    if (f->coll != FC_NCCL_COLL_AllReduce) one_host_role(c, role);
    else if (f->algo == FC_NCCL_ALGO_NVLS_TREE || c->w->coll.oneNode)
        allreduce_role(c, role, f->algo == FC_NCCL_ALGO_NVLS_TREE);
    else allreduce_collnet_role(c, role);
}

static void run_roles(fc_coll *c, const int *roles, int n) { fc_coll_run_roles(c, role_run, roles, role_names, n); }

void fc_allreduce_nvls(fc_coll *c)
{
    static const int heads[] = {SCATTER, GATHER, REDUCE}, out[] = {SCATTER, GATHER, REDUCE, BCAST},
                     others[] = {SCATTER, GATHER};
    if (c->ch->nvls.headRank < 0) run_roles(c, others, 2);
    else if (!c->w->coll.oneNode && c->ch->nvls.out >= 0) run_roles(c, out, 4);
    else run_roles(c, heads, 3);
}

void fc_allreduce_nvls_tree(fc_coll *c)
{
    static const int up[] = {SCATTER, GATHER, REDUCE, BCAST}, root[] = {SCATTER, GATHER, REDUCE},
                     others[] = {SCATTER, GATHER};
    if (c->ch->nvls.headRank < 0) run_roles(c, others, 2);
    else if (c->ch->nvls.treeUp >= 0) run_roles(c, up, 4);
    else run_roles(c, root, 3);
}

void fc_allgather_nvls(fc_coll *c)
{
    static const int roles[] = {GATHER, BCAST}, rails[] = {GATHER, NET_SEND, BCAST};
    if (c->w->coll.oneNode) run_roles(c, roles, 2);
    else fc_coll_run_roles(c, rails_role, rails, rail_role_names, 3);
}

void fc_reducescatter_nvls(fc_coll *c)
{
    static const int roles[] = {SCATTER, REDUCE}, rails[] = {NET_RECV, SCATTER, REDUCE};
    if (c->w->coll.oneNode) run_roles(c, roles, 2);
    else fc_coll_run_roles(c, rails_role, rails, rail_role_names, 3);
}
