/* Where a channel's connections are in the device communicator (see
 * decode.h): the channel's array of pointers to its peers'
 * ncclChannelPeer, and each connection's ncclConnInfo in those. */
#include "decode.h"

uintptr_t fc_nccl_peer_slot(const fc_nccl_channel *c, int peer)
{
    return c->peers && peer >= 0 ? c->peers + (uintptr_t)peer * sizeof(void *) : 0;
}

uintptr_t fc_nccl_conn_of_peer(const fc_nccl_launch *l, uintptr_t peerp, bool send, int connIndex)
{
    const fc_nccl_layout *L = l->rel->layout;
    if (!peerp || connIndex < 0 || connIndex >= L->NCCL_MAX_CONNS) return 0;
    fc_nccl_field side = send ? L->peer_send : L->peer_recv;
    return peerp + (uintptr_t)side.off + (uintptr_t)connIndex * L->conn.size;
}

uintptr_t fc_nccl_conn_addr(const fc_nccl_launch *l, const fc_nccl_channel *c, int peer, bool send,
                            int connIndex)
{
    uintptr_t slot = fc_nccl_peer_slot(c, peer), p = 0;
    if (!slot || !fc_nccl_read(slot, &p, sizeof p)) return 0;
    return fc_nccl_conn_of_peer(l, p, send, connIndex);
}
