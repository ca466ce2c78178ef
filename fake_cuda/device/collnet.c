/* CollNet AllReduce: RunWorkColl of all_reduce.h for NCCL_ALGO_COLLNET_CHAIN
 * and NCCL_ALGO_COLLNET_DIRECT, protocol Simple, without registered buffers.
 *
 * One rank per host and channel group talks to the network (the peer
 * nRanks, the CollNet connection, which NCCL's proxy drives through the net
 * plugin's in-network reduction). Chain: the host's GPUs form a chain; each
 * reduces what comes from below and passes it up (connIndex 1), the head's
 * "up" is the network, and the result comes back down the chain
 * (connIndex 0). Direct: every GPU scatters its shares to the heads
 * (connIndex 1), each head reduces its share from every GPU of the host and
 * sends it to the network, then broadcasts the network's result to every GPU
 * (connIndex 0), which gathers the heads' shares. The element ranges follow
 * work->collnet (count, chunkCount) as the kernels do. */
#include "algorithms.h"
#include "collective.h"
#include "rails.h"

static bool prims_of(fc_coll *c, fc_prims *p, const int *recv, int nrecv, const int *send, int nsend, int connIndex)
{
    fc_prims_cfg cfg = {.proto = FC_NCCL_PROTO_SIMPLE, .slicePerChunk = 1, .stepPerSlice = 1,
                        .connIndexRecv = connIndex, .connIndexSend = connIndex};
    return fc_prims_init(p, c->e, c->t, c->ch, c->who, &cfg, recv, nrecv, send, nsend, c->w->coll.sendbuff,
                         c->w->coll.recvbuff, c->op);
}

/* ---- Chain ---- */

enum { CHAIN_UP, CHAIN_DOWN };
static const char *const chain_names[] = {"reduce up", "broadcast down"};

static void chain_part(fc_coll *c, int role)
{
    const fc_nccl_channel *ch = c->ch;
    const fc_nccl_work *w = c->w;
    bool up = role == CHAIN_UP;
    int recv = up ? ch->chain.down0 : ch->chain.up, send = up ? ch->chain.up : ch->chain.down0;
    fc_prims p;
    if (!prims_of(c, &p, &recv, 1, &send, 1, up ? 1 : 0)) return;
    int64_t bid = ch->id - w->coll.channelLo, nChannels = w->coll.channelHi - w->coll.channelLo + 1;
    int64_t chunk = w->coll.collnetChunkCount, size = (int64_t)w->coll.collnetCount, loop = nChannels * chunk;
    bool first = !up && recv == c->e->l->nRanks; /* the network's result enters the chain here: postOp */
    for (int64_t gridOffset = 0; gridOffset < size; gridOffset += loop) {
        int64_t offset = gridOffset + bid * chunk, nelem = min64(chunk, size - offset);
        if (up && recv < 0) FC_SEND(&p, offset, nelem);
        else if (up) FC_RECV_REDUCE_SEND(&p, offset, nelem);
        else if (send < 0) FC_RECV(&p, offset, nelem, first);
        else fc_prims_op(&p, true, true, FC_BUF_NONE, 0, FC_BUF_OUTPUT, offset, nelem, first);
    }
    fc_prims_fini(&p);
}

void fc_allreduce_collnet_chain(fc_coll *c)
{
    static const int roles[] = {CHAIN_UP, CHAIN_DOWN};
    fc_coll_run_roles(c, chain_part, roles, chain_names, 2);
}

/* ---- Direct ---- */

enum { DIRECT_SCATTER, DIRECT_REDUCE, DIRECT_GATHER, DIRECT_BCAST };
static const char *const direct_names[] = {"scatter", "reduce", "gather", "broadcast"};

static int count_peers(const int *peers)
{
    int n = 0;
    while (n < 7 && peers[n] >= 0) n++;
    return n;
}

static void direct_part(fc_coll *c, int role)
{
    const fc_nccl_channel *ch = c->ch;
    const fc_nccl_work *w = c->w;
    int64_t bid = ch->id - w->coll.channelLo, nChannels = w->coll.channelHi - w->coll.channelLo + 1;
    int64_t chunk = w->coll.collnetChunkCount, size = (int64_t)w->coll.collnetCount;
    int nHeads = ch->direct.nHeads, nup = count_peers(ch->direct.up), ndown = count_peers(ch->direct.down);
    int64_t loop = nChannels * nHeads * chunk;
    int64_t base = bid * nHeads * chunk, headBase = (bid * nHeads + ch->direct.headRank) * chunk;
    fc_prims p;
    bool ok;
    switch (role) {
    case DIRECT_SCATTER: ok = prims_of(c, &p, NULL, 0, ch->direct.up, nup, 1); break;
    case DIRECT_GATHER: ok = prims_of(c, &p, ch->direct.up, nup, NULL, 0, 0); break;
    case DIRECT_REDUCE: ok = prims_of(c, &p, ch->direct.down, ndown, &ch->direct.out, 1, 1); break;
    default: ok = prims_of(c, &p, &ch->direct.out, 1, ch->direct.down, ndown, 0); break;
    }
    if (!ok) return;
    for (int64_t gridOffset = 0; gridOffset < size; gridOffset += loop) {
        int64_t offset = gridOffset + base, nelem = min64(nHeads * chunk, size - offset);
        int64_t headOffset = gridOffset + headBase, headElem = min64(chunk, size - headOffset);
        switch (role) {
        case DIRECT_SCATTER: fc_prims_scatter(&p, offset, nelem, chunk, chunk, ch->direct.headRank, ch->direct.shift); break;
        case DIRECT_GATHER:
            fc_prims_gather(&p, offset, nelem, chunk, chunk, ch->direct.headRank, ch->direct.shift, false);
            break;
        case DIRECT_REDUCE: /* this head's share from every GPU of the host, to the network */
            if (ndown) FC_RECV_REDUCE_SEND(&p, headOffset, headElem);
            else FC_SEND(&p, headOffset, headElem);
            break;
        default: /* the network's result for this share, to the output and every GPU */
            fc_prims_op(&p, true, ndown > 0, FC_BUF_NONE, 0, FC_BUF_OUTPUT, headOffset, headElem, true);
            break;
        }
    }
    fc_prims_fini(&p);
}

void fc_allreduce_collnet_direct(fc_coll *c)
{
    const fc_nccl_channel *ch = c->ch;
    int roles[4], n = 0;
    if (ch->direct.up[0] >= 0) roles[n++] = DIRECT_SCATTER, roles[n++] = DIRECT_GATHER;
    if (ch->direct.out >= 0) roles[n++] = DIRECT_REDUCE, roles[n++] = DIRECT_BCAST;
    fc_coll_run_roles(c, direct_part, roles, direct_names, n);
}

/* ---- Direct AllGather and ReduceScatter (all_gather.h, reduce_scatter.h) ----
 * Every GPU is the head of its own rail (rails.h). AllGather: each sends its
 * part of a window to the network, receives the window of its rail from it,
 * keeps it and passes it to the host's other heads, and keeps what theirs
 * bring. ReduceScatter: each scatters the other rails' parts of its input to
 * their heads, reduces its own rail's part with what they scatter to it and
 * sends that to the network, and receives its own part of the result. */

enum { RAIL_NET_SEND, RAIL_NET_RECV, RAIL_PEERS };
static const char *const rail_names[] = {"network send", "network receive", "host's heads"};

static void rails_part(fc_coll *c, int role)
{
    const fc_nccl_channel *ch = c->ch;
    bool gather = c->func->coll == FC_NCCL_COLL_AllGather;
    int nHeads = ch->direct.nHeads, headRank = ch->direct.headRank;
    const int *others = &ch->direct.heads[1];
    int nothers = nHeads - 1;
    fc_prims p;
    fc_rails r;
    bool ok;
    /* AllGather: network send on connIndex 1, the rest on 0; ReduceScatter:
     * everything towards the network on 1, the result back on 0. */
    switch (role) {
    case RAIL_NET_SEND:
        ok = gather ? prims_of(c, &p, NULL, 0, &ch->direct.out, 1, 1)
                    : prims_of(c, &p, others, nothers, &ch->direct.out, 1, 1);
        break;
    case RAIL_NET_RECV:
        ok = gather ? prims_of(c, &p, &ch->direct.out, 1, others, nothers, 0)
                    : prims_of(c, &p, &ch->direct.out, 1, NULL, 0, 0);
        break;
    default:
        ok = gather ? prims_of(c, &p, others, nothers, NULL, 0, 0) : prims_of(c, &p, NULL, 0, others, nothers, 1);
        break;
    }
    if (!ok || !fc_rails_init(&r, c, nHeads)) return; /* the emulation failed: said why */
    while (fc_rails_next(&r)) {
        int64_t own, n;
        fc_rails_own(&r, &own, &n);
        /* the network's side is this GPU's rail; heads[1..] the next rails in turn */
        fc_rails_step s = {.r = &r, .rail0 = role == RAIL_PEERS ? headRank + 1 : headRank, .user = true};
        fc_prims_step_fn step = gather ? fc_rails_gather : fc_rails_scatter;
        if (gather && role == RAIL_NET_SEND) FC_SEND(&p, own, n);
        else if (!gather && role == RAIL_NET_RECV) FC_RECV(&p, own, n, true);
        else if (role == RAIL_PEERS) fc_prims_process(&p, gather, !gather, fc_rails_size(&r), step, &s);
        else fc_prims_process(&p, true, true, fc_rails_size(&r), step, &s);
    }
    fc_prims_fini(&p);
    fc_rails_fini(&r);
}

static void run_rails(fc_coll *c)
{
    static const int multi[] = {RAIL_NET_SEND, RAIL_NET_RECV, RAIL_PEERS}, single[] = {RAIL_NET_SEND, RAIL_NET_RECV};
    bool one = c->ch->direct.nHeads <= 1;
    fc_coll_run_roles(c, rails_part, one ? single : multi, rail_names, one ? 2 : 3);
}

void fc_allgather_collnet_direct(fc_coll *c) { run_rails(c); }
void fc_reducescatter_collnet_direct(fc_coll *c) { run_rails(c); }
