/* Decoding of NCCL kernel launches (ncclDevKernel_*): the argument block, the
 * work each channel (CUDA block) runs (decode.c), and from the device
 * communicator the ring/tree neighbours and the ncclConnInfo of every
 * connection the work uses (resolve.c). The emulation (emulation.h) plays
 * the kernel from what is decoded here. */
#ifndef NCCLSIM_DEVICE_DECODE_H
#define NCCLSIM_DEVICE_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "sim_read.h"

typedef struct {
    uint8_t type; /* FC_NCCL_WORK_* */
    union {
        struct { /* Coll and CollReg (the registered-buffer arrays are not kept) */
            uint8_t channelLo, channelHi, nWarps, direct;
            bool redOpArgIsPtr, regUsed, netRegUsed, oneNode;
            uint32_t root;
            uintptr_t sendbuff, recvbuff;
            uint64_t countLo, countMid, countHi; /* elements */
            uint32_t chunkGrainsLo, chunkGrainsMid, chunkGrainsHi;
            uint64_t collnetCount;
            uint32_t collnetChunkCount;
            uint64_t redOpArg;
        } coll;
        struct {
            uintptr_t sendAddr, recvAddr;
            uint64_t sendBytes, recvBytes;
            int32_t sendRank, recvRank;
            uint8_t nP2pChannels, channelBase, nSendChannels, nRecvChannels;
            uint8_t sendChunkSize_u32fp8, recvChunkSize_u32fp8;
            bool sendProtoLL, recvProtoLL, sendNetReg, recvNetReg, sendIpcReg, recvIpcReg;
        } p2p;
        struct {
            int32_t ringDepth, chunkSize;
            uintptr_t sendbuff, recvbuff;
            uint64_t bytes, bytesDone;
        } bcast;
    };
} fc_nccl_work;

/* What a block runs in one turn of its loop: batches joined by nextExtends. */
typedef struct {
    int funcId;
    const fc_nccl_func *func; /* NULL when funcId is outside the release's list */
    uint8_t workType;
    int first_work, nworks; /* in fc_nccl_launch.works */
    uint32_t consumed;      /* FIFO cursor past its last work item (what <= 2.26 reports) */
} fc_nccl_batch;

typedef struct {
    int id;                  /* channel: the block's set bit of channelMask */
    int first_batch, nbatches; /* in fc_nccl_launch.batches, in execution order */
    /* From the device communicator (fc_nccl_resolve): */
    uintptr_t dev;   /* its ncclDevChannel */
    uintptr_t peers; /* ncclDevChannelPeer *[] indexed by rank */
    int ring_prev, ring_next, ring_index;
    uintptr_t ring_userRanks; /* int[nRanks]: the ring's ranks starting at this one */
    int tree_up, tree_down[3];
    struct { /* collnetChain (ncclTree): up is nRanks (the CollNet peer) at the chain's head */
        int up, down0;
    } chain;
    struct { /* collnetDirect (ncclDirect); up and down end at the first -1;
               * heads: every head of the host, this rank's first */
        int out, nHeads, headRank, shift, up[7], down[7], heads[8]; /* NCCL_MAX_DIRECT_ARITY (+1) */
    } direct;
    struct { /* ncclNvls: peers nRanks+1+h are the NVLS heads */
        int out, nHeads, headRank, down, treeUp, treeDown[3];
        int up[32]; /* NCCL_MAX_NVLS_ARITY */
    } nvls;
} fc_nccl_channel;

typedef struct fc_nccl_launch {
    const fc_nccl_release *rel;
    uint64_t serial; /* this launch's number in the process, from 1 */
    char kernel[96]; /* the kernel's name, demangled identifier */
    unsigned long long stream;
    unsigned grid, block;
    int device; /* the GPU it runs on (the stream's), an ordinal of the host */
    size_t args_size;
    uintptr_t comm, workBuf;
    uint64_t channelMask;
    uint32_t workMask;
    uint8_t storage; /* 0 args, 1 fifo, 2 persistent */
    int nchannels, nbatches, nworks;
    /* fc_nccl_resolve: */
    bool resolved;
    int rank, nRanks, node, nNodes, buffSizes[3], p2pChunkSize;
    uintptr_t collNetDenseToUserRank; /* int[nNodes * nHeads]: CollNet's (host, head) -> rank */
    uintptr_t abortFlag; /* uint32_t NCCL sets to stop its kernels */
    uintptr_t workConsumed, workStarted, workCompleted; /* per-channel progress for the host; 0: none */
    int nconns, nconns_bad; /* connections the work uses / not in simulated memory */
    char error[200];        /* first problem found, "" when none */
    /* Last: the arrays, which a freed launch kept for a later decode keeps
     * with their room (decode.c clears what comes before). */
    unsigned char *args; /* copy of the argument block */
    fc_nccl_channel *channels;
    fc_nccl_batch *batches;
    fc_nccl_work *works;
    size_t args_cap;
    int channels_cap, batches_cap, works_cap;
} fc_nccl_launch;

/* decode.c: decode the argument block of a launch with `grid` blocks. NULL
 * only when out of memory; a launch that cannot be decoded has `error` set. */
fc_nccl_launch *fc_nccl_decode_args(const fc_nccl_release *rel, const void *args, size_t size,
                                    unsigned grid);
void fc_nccl_launch_free(fc_nccl_launch *l);
/* Set l->error unless already set: the first problem is kept, later ones
 * follow from it. */
void fc_nccl_launch_error(fc_nccl_launch *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The elements of a collective work item split across channels (`cbd`):
 * countLo on channelLo, countMid on each channel between, countHi on channelHi. */
static inline int64_t fc_nccl_cbd_count(const fc_nccl_work *w)
{
    int64_t nMid = (int64_t)w->coll.channelHi - w->coll.channelLo - 1;
    return (int64_t)w->coll.countLo + (int64_t)w->coll.countMid * (nMid > 0 ? nMid : 0) + (int64_t)w->coll.countHi;
}
/* The elements of a collective work item as NCCL counts them (per rank:
 * AllGather's send count, ReduceScatter's receive count): the count of the
 * CollNet-style part for algorithms that use it (CollNet, NVLS across
 * hosts), else the sum of the channels' parts. */
int64_t fc_nccl_coll_count(const fc_nccl_launch *l, const fc_nccl_work *w, int algo);

/* resolve.c: read the communicator, channels and connections (stream order). */
void fc_nccl_resolve(fc_nccl_launch *l);
/* conn_addr.c: address of the ncclConnInfo send[connIndex] / recv[connIndex] towards
 * `peer` on channel c; 0 when unreadable. It is found in two parts: where
 * the channel keeps its pointer to the peer's ncclChannelPeer (0: none),
 * and the connection in the ncclChannelPeer at peerp (0: none). */
uintptr_t fc_nccl_conn_addr(const fc_nccl_launch *l, const fc_nccl_channel *c, int peer, bool send,
                            int connIndex);
uintptr_t fc_nccl_peer_slot(const fc_nccl_channel *c, int peer);
uintptr_t fc_nccl_conn_of_peer(const fc_nccl_launch *l, uintptr_t peerp, bool send, int connIndex);
/* The channel's part of a P2P transfer (ncclP2pChannelToPart); part >= nParts: none. */
int fc_nccl_p2p_part(const fc_nccl_launch *l, int nP2pChannels, int base, int channel);

/* decode_trace.c: one "nccl_launch" trace event with what was decoded. */
void fc_nccl_trace_launch(const fc_nccl_launch *l);

#endif
