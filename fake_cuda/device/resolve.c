/* Reading an NCCL launch's device communicator (see decode.h): its rank and
 * buffers, each channel's ring and tree neighbours, and a check that every
 * connection the decoded work uses lies in simulated memory. Done in stream
 * order, where the kernel would read them. */
#include "decode.h"

#include "conn_cache.h"

/* Element i of an int32 array field (buffSizes[3], tree.down[3]). */
static int i32_element(const void *base, fc_nccl_field array, int i)
{
    array.off += i * 4;
    array.size = 4;
    return (int)(int32_t)fc_nccl_get(base, array);
}

int fc_nccl_p2p_part(const fc_nccl_launch *l, int nP2pChannels, int base, int channel)
{
    if (nP2pChannels <= 0) return 0;
    int delta = (channel - base) & (nP2pChannels - 1); /* nP2pChannels is a power of two */
    if (!l->rel->layout->P2P_PART_BITREVERSE) return delta;
    int log2 = __builtin_popcount((unsigned)nP2pChannels - 1), part = 0;
    for (int i = 0; i < log2; i++) part |= (delta >> i & 1) << (log2 - 1 - i);
    return part;
}

/* A connection the work uses: its ncclConnInfo and the head, tail and FIFO it
 * points at must all be simulated memory, or the emulation has nothing to drive. */
static void check_conn(fc_nccl_launch *l, const fc_nccl_channel *c, int peer, bool send, int connIndex, int proto)
{
    const fc_nccl_layout *L = l->rel->layout;
    if (peer < 0 || peer == l->rank) return; /* no connection to oneself */
    l->nconns++;
    /* Past the ranks: CollNet (nRanks), then the NVLS heads (channel.cc). */
    if (peer > l->nRanks + L->NCCL_MAX_NVLS_ARITY) {
        l->nconns_bad++;
        fc_nccl_launch_error(l, "channel %d: peer %d is not a rank of %d", c->id, peer, l->nRanks);
        return;
    }
    if (fc_conn_cache_lookup(l, c, peer, send, connIndex, proto)) return; /* checked before, unchanged */
    uintptr_t at = fc_nccl_conn_addr(l, c, peer, send, connIndex);
    unsigned char conn[512];
    if (!at || L->conn.size > sizeof conn || !fc_nccl_read(at, conn, L->conn.size)) {
        l->nconns_bad++;
        fc_nccl_launch_error(l, "channel %d: %s[%d] towards rank %d is not in simulated memory", c->id,
                             send ? "send" : "recv", connIndex, peer);
        return;
    }
    uintptr_t tail = fc_nccl_get(conn, L->conn_tail), head = fc_nccl_get(conn, L->conn_head);
    uintptr_t fifo = fc_nccl_get(conn, L->conn_connFifo);
    const char *bad = !fc_nccl_in_sim_memory(tail, 8) ? "tail"
                    : !fc_nccl_in_sim_memory(head, 8) ? "head"
                    : fifo && !fc_nccl_in_sim_memory(fifo, (size_t)L->NCCL_STEPS * L->connFifo.size) ? "connFifo"
                    : NULL;
    if (bad) {
        l->nconns_bad++;
        fc_nccl_launch_error(l, "channel %d: %s[%d] towards rank %d: %s 0x%lx is not in simulated memory",
                             c->id, send ? "send" : "recv", connIndex, peer, bad,
                             (unsigned long)(bad[0] == 't' ? tail : bad[0] == 'h' ? head : fifo));
    }
}

/* The connections the kernel would use on channel c for batch b. */
static void check_batch_conns(fc_nccl_launch *l, const fc_nccl_channel *c, const fc_nccl_batch *b)
{
    /* the protocol whose kept connection (conn_cache.h) vouches for one */
    int proto = b->func ? b->func->proto : FC_NCCL_PROTO_SIMPLE;
    if (b->workType == FC_NCCL_WORK_P2P) { /* P2P runs on connIndex 1 (sendrecv.h) */
        for (int i = 0; i < b->nworks; i++) {
            const fc_nccl_work *w = &l->works[b->first_work + i];
            int part = fc_nccl_p2p_part(l, w->p2p.nP2pChannels, w->p2p.channelBase, c->id);
            if (part < w->p2p.nSendChannels) check_conn(l, c, w->p2p.sendRank, true, 1, proto);
            if (part < w->p2p.nRecvChannels) check_conn(l, c, w->p2p.recvRank, false, 1, proto);
        }
        return;
    }
    if (l->nRanks <= 1) return;
    int algo = b->func ? b->func->algo : -1;
    if (b->workType == FC_NCCL_WORK_BCAST || algo == FC_NCCL_ALGO_RING) {
        check_conn(l, c, c->ring_next, true, 0, proto);
        check_conn(l, c, c->ring_prev, false, 0, proto);
    } else if (algo == FC_NCCL_ALGO_TREE) {
        check_conn(l, c, c->tree_up, true, 0, proto);
        check_conn(l, c, c->tree_up, false, 0, proto);
        for (int d = 0; d < 3; d++) {
            check_conn(l, c, c->tree_down[d], true, 0, proto);
            check_conn(l, c, c->tree_down[d], false, 0, proto);
        }
    } else if (algo == FC_NCCL_ALGO_PAT) { /* the ranks at distance 2^d, both ways */
        for (long d = 1; d < l->nRanks; d <<= 1) {
            int lower = (int)((l->rank - d + l->nRanks) % l->nRanks), upper = (int)((l->rank + d) % l->nRanks);
            check_conn(l, c, lower, false, 0, proto);
            check_conn(l, c, lower, true, 0, proto);
            check_conn(l, c, upper, false, 0, proto);
            check_conn(l, c, upper, true, 0, proto);
        }
    } else if (algo == FC_NCCL_ALGO_NVLS || algo == FC_NCCL_ALGO_NVLS_TREE) {
        /* scatter (send[1]) and gather (recv[1]) towards every head; a head's
         * reduce (recv[0]) and broadcast (send[0]) through the multicast
         * buffers; NVLSTree's heads also over the network, connIndex 0 */
        int coll = b->func->coll;
        for (int h = 0; h < c->nvls.nHeads && h < 32; h++) {
            if (coll != FC_NCCL_COLL_AllGather) check_conn(l, c, c->nvls.up[h], true, 1, proto);
            if (coll != FC_NCCL_COLL_ReduceScatter) check_conn(l, c, c->nvls.up[h], false, 1, proto);
        }
        if (c->nvls.headRank >= 0 || coll == FC_NCCL_COLL_AllGather) {
            if (coll != FC_NCCL_COLL_AllGather) check_conn(l, c, c->nvls.down, false, 0, proto);
            if (coll != FC_NCCL_COLL_ReduceScatter) check_conn(l, c, c->nvls.down, true, 0, proto);
        }
        if (algo == FC_NCCL_ALGO_NVLS && c->nvls.headRank >= 0 && c->nvls.out >= 0) { /* CollNet: up 1, down 0 */
            check_conn(l, c, c->nvls.out, true, 1, proto);
            check_conn(l, c, c->nvls.out, false, 0, proto);
        }
        if (algo == FC_NCCL_ALGO_NVLS_TREE && c->nvls.headRank >= 0) {
            check_conn(l, c, c->nvls.treeUp, true, 0, proto);
            check_conn(l, c, c->nvls.treeUp, false, 0, proto);
            for (int d = 1; d < 3; d++) {
                check_conn(l, c, c->nvls.treeDown[d], true, 0, proto);
                check_conn(l, c, c->nvls.treeDown[d], false, 0, proto);
            }
        }
    } else if (algo == FC_NCCL_ALGO_COLLNET_CHAIN) { /* reduce up on connIndex 1, broadcast down on 0 */
        check_conn(l, c, c->chain.down0, false, 1, proto);
        check_conn(l, c, c->chain.up, true, 1, proto);
        check_conn(l, c, c->chain.up, false, 0, proto);
        check_conn(l, c, c->chain.down0, true, 0, proto);
    } else if (algo == FC_NCCL_ALGO_COLLNET_DIRECT) { /* scatter/reduce on connIndex 1, gather/broadcast on 0 */
        for (int d = 0; d < 7; d++) {
            if (c->direct.up[d] >= 0) check_conn(l, c, c->direct.up[d], true, 1, proto), check_conn(l, c, c->direct.up[d], false, 0, proto);
            if (c->direct.down[d] >= 0) check_conn(l, c, c->direct.down[d], false, 1, proto), check_conn(l, c, c->direct.down[d], true, 0, proto);
        }
        if (c->direct.out >= 0) check_conn(l, c, c->direct.out, true, 1, proto), check_conn(l, c, c->direct.out, false, 0, proto);
    }
}

void fc_nccl_resolve(fc_nccl_launch *l)
{
    const fc_nccl_layout *L = l->rel->layout;
    if (l->error[0]) return;
    unsigned char comm[512], chan[1024];
    if (L->comm.size > sizeof comm || L->channel.size > sizeof chan) {
        fc_nccl_launch_error(l, "layout of NCCL %s: comm or channel larger than expected", l->rel->version);
        return;
    }
    if (!fc_nccl_read(l->comm, comm, L->comm.size)) {
        fc_nccl_launch_error(l, "the device communicator 0x%lx is not in simulated memory", (unsigned long)l->comm);
        return;
    }
    l->rank = (int)(int32_t)fc_nccl_get(comm, L->comm_rank);
    l->nRanks = (int)(int32_t)fc_nccl_get(comm, L->comm_nRanks);
    l->node = (int)(int32_t)fc_nccl_get(comm, L->comm_node);
    l->nNodes = (int)(int32_t)fc_nccl_get(comm, L->comm_nNodes);
    for (int p = 0; p < 3; p++) l->buffSizes[p] = i32_element(comm, L->comm_buffSizes, p);
    l->p2pChunkSize = (int)(int32_t)fc_nccl_get(comm, L->comm_p2pChunkSize);
    l->abortFlag = fc_nccl_get(comm, L->comm_abortFlag);
    l->collNetDenseToUserRank = fc_nccl_get(comm, L->comm_collNetDenseToUserRank);
    l->workConsumed = fc_nccl_get(comm, L->comm_workConsumed);
    l->workStarted = fc_nccl_get(comm, L->comm_workStarted);
    l->workCompleted = fc_nccl_get(comm, L->comm_workCompleted);
    uintptr_t chans = l->comm + (uintptr_t)L->commAndChannels_channels.off;
    /* The kernel finds its channel next to the comm; the comm also points at
     * it. Agreement is a cheap check that this layout is the right one. */
    if (fc_nccl_get(comm, L->comm_channels) != chans || l->nRanks <= 0 || l->rank < 0 || l->rank >= l->nRanks) {
        fc_nccl_launch_error(l, "the device communicator does not match NCCL %s's layout (rank %d of %d)",
                             l->rel->version, l->rank, l->nRanks);
        return;
    }
    for (int i = 0; i < l->nchannels; i++) {
        fc_nccl_channel *c = &l->channels[i];
        c->dev = chans + (uintptr_t)c->id * L->channel.size;
        if (!fc_nccl_read(c->dev, chan, L->channel.size)) {
            fc_nccl_launch_error(l, "channel %d is not in simulated memory", c->id);
            return;
        }
        c->peers = fc_nccl_get(chan, L->channel_peers);
        c->ring_prev = (int)(int32_t)fc_nccl_get(chan, L->channel_ring_prev);
        c->ring_next = (int)(int32_t)fc_nccl_get(chan, L->channel_ring_next);
        c->ring_index = (int)(int32_t)fc_nccl_get(chan, L->channel_ring_index);
        c->ring_userRanks = fc_nccl_get(chan, L->channel_ring_userRanks);
        c->tree_up = (int)(int32_t)fc_nccl_get(chan, L->channel_tree_up);
        for (int d = 0; d < 3; d++) c->tree_down[d] = i32_element(chan, L->channel_tree_down, d);
        c->chain.up = (int)(int32_t)fc_nccl_get(chan, L->channel_collnetChain_up);
        c->chain.down0 = i32_element(chan, L->channel_collnetChain_down, 0);
        c->direct.out = (int)(int32_t)fc_nccl_get(chan, L->channel_collnetDirect_out);
        c->direct.nHeads = (int)(int32_t)fc_nccl_get(chan, L->channel_collnetDirect_nHeads);
        c->direct.headRank = (int)(int32_t)fc_nccl_get(chan, L->channel_collnetDirect_headRank);
        c->direct.shift = (int)(int32_t)fc_nccl_get(chan, L->channel_collnetDirect_shift);
        for (int d = 0; d < 7; d++) {
            c->direct.up[d] = i32_element(chan, L->channel_collnetDirect_up, d);
            c->direct.down[d] = i32_element(chan, L->channel_collnetDirect_down, d);
        }
        for (int h = 0; h < 8; h++)
            c->direct.heads[h] = h < c->direct.nHeads ? i32_element(chan, L->channel_collnetDirect_heads, h) : -1;
        c->nvls.out = (int)(int32_t)fc_nccl_get(chan, L->channel_nvls_out);
        c->nvls.nHeads = (int)(int32_t)fc_nccl_get(chan, L->channel_nvls_nHeads);
        c->nvls.headRank = (int)(int32_t)fc_nccl_get(chan, L->channel_nvls_headRank);
        c->nvls.down = (int)(int32_t)fc_nccl_get(chan, L->channel_nvls_down);
        c->nvls.treeUp = (int)(int32_t)fc_nccl_get(chan, L->channel_nvls_treeUp);
        for (int d = 0; d < 3; d++) c->nvls.treeDown[d] = i32_element(chan, L->channel_nvls_treeDown, d);
        for (int h = 0; h < 32; h++) c->nvls.up[h] = h < c->nvls.nHeads ? i32_element(chan, L->channel_nvls_up, h) : -1;
        for (int b = 0; b < c->nbatches; b++) check_batch_conns(l, c, &l->batches[c->first_batch + b]);
    }
    l->resolved = true;
}
