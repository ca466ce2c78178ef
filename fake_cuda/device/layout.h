/* Where NCCL keeps what its kernels read, per NCCL release.
 *
 * The numbers live in fake_cuda/device/layouts/ (layouts.json and the funcId
 * lists); fake_cuda/device/layouts/gen_layouts.py turns them into the table
 * fc_nccl_releases[] (nccl_layouts_gen.c). The X-lists below are the one
 * vocabulary both sides use: the generator reads them from this file and
 * refuses data that names a field or a function part not listed here. */
#ifndef NCCLSIM_DEVICE_LAYOUT_H
#define NCCLSIM_DEVICE_LAYOUT_H

#include <stdint.h>

/* One field: `size` bytes at byte `off`; a bit field is `bits` bits from bit
 * `bit` of the little-endian word of `size` bytes at `off`. off < 0: the
 * release has no such field. A struct's own size is kept as a field at 0. */
typedef struct {
    int32_t off;
    uint32_t size;
    uint8_t bit, bits;
} fc_nccl_field;

/* JSON name "a.b.c" -> member a_b_c. */
#define FC_NCCL_FIELDS(X)                                                                          \
    /* ncclDevKernelArgs: the launch's argument block; batches follow at +sizeof */                \
    X(args) X(args_comm) X(args_channelMask) X(args_workStorageType) X(args_workMask)              \
    X(args_workBuf)                                                                                \
    /* ncclDevWorkBatch */                                                                         \
    X(batch) X(batch_nextJump) X(batch_nextExtends) X(batch_workType) X(batch_funcId)              \
    X(batch_offsetBase) X(batch_offsetBitset)                                                      \
    /* ncclDevWorkP2p */                                                                           \
    X(p2p) X(p2p_sendAddr) X(p2p_recvAddr) X(p2p_sendBytes) X(p2p_recvBytes) X(p2p_sendRank)       \
    X(p2p_recvRank) X(p2p_nP2pChannels) X(p2p_channelBase) X(p2p_nSendChannels)                    \
    X(p2p_nRecvChannels) X(p2p_sendChunkSize_u32fp8) X(p2p_recvChunkSize_u32fp8)                   \
    X(p2p_sendProtoLL) X(p2p_recvProtoLL) X(p2p_sendNetReg) X(p2p_recvNetReg) X(p2p_sendIpcReg)    \
    X(p2p_recvIpcReg) X(p2p_profilerEnabled)                                                       \
    /* ncclDevWorkColl (cbd.* and collnet.* flattened) */                                          \
    X(coll) X(coll_channelLo) X(coll_channelHi) X(coll_nWarps) X(coll_redOpArgIsPtr)               \
    X(coll_regUsed) X(coll_netRegUsed) X(coll_oneNode) X(coll_direct) X(coll_root)                 \
    X(coll_recvbuff) X(coll_sendbuff) X(coll_sendbuffOffset) X(coll_recvbuffOffset)                \
    X(coll_sendbuffRmtAddrs) X(coll_recvbuffRmtAddrs) X(coll_countLo) X(coll_countMid)             \
    X(coll_countHi) X(coll_chunkGrainsLo) X(coll_chunkGrainsMid) X(coll_chunkGrainsHi)             \
    X(coll_collnetCount) X(coll_collnetChunkCount) X(coll_redOpArg) X(coll_isOneRPN)               \
    X(coll_profilerEnabled)                                                                        \
    /* ncclDevWorkCollReg, ncclDevWorkBcast (2.29+) */                                             \
    X(collreg) X(collreg_coll) X(collreg_dnInputs) X(collreg_dnOutputs) X(collreg_upOutputs)       \
    X(bcast) X(bcast_ringDepth) X(bcast_chunkSize) X(bcast_sendbuff) X(bcast_recvbuff)             \
    X(bcast_bytes) X(bcast_bytesDone)                                                              \
    /* ncclDevComm (<= 2.27) / ncclKernelComm (2.28+), and the channels after it */                \
    X(comm) X(comm_rank) X(comm_nRanks) X(comm_node) X(comm_nNodes) X(comm_buffSizes)              \
    X(comm_isAllNvlink) X(comm_p2pChunkSize) X(comm_abortFlag) X(comm_channels)                    \
    X(comm_rankToLocalRank) X(comm_collNetDenseToUserRank) X(commAndChannels_channels)             \
    /* what the kernel writes for the host: comm.workConsumed -> uint32_t[MAXCHANNELS] (<= 2.26,   \
     * written after each batch load when args.workStorageType is Fifo); comm.workStarted,         \
     * workCompleted -> uint64_t[MAXCHANNELS] (2.26) or ncclDevProfiler[MAXCHANNELS] (2.27+) */    \
    X(comm_workConsumed) X(comm_workStarted) X(comm_workCompleted) X(comm_p2pCrossClique)          \
    /* ncclDevProfiler (2.27+): data[MAX_PROFILER_EVENTS_PER_CHANNEL] of {counter, timestamp} */   \
    X(devProfiler) X(devProfiler_counter) X(devProfiler_timestamp)                                 \
    /* ncclDevChannel */                                                                           \
    X(channel) X(channel_peers) X(channel_ring_prev) X(channel_ring_next) X(channel_ring_userRanks) \
    X(channel_ring_rankToIndex) X(channel_ring_index) X(channel_tree_depth) X(channel_tree_up)     \
    X(channel_tree_down) X(channel_workFifoDone) X(channel_workCounter)                            \
    /* ncclDevChannel.collnetChain (ncclTree), .collnetDirect (ncclDirect), .nvls (ncclNvls) */    \
    X(channel_collnetChain_up) X(channel_collnetChain_down) X(channel_collnetDirect_out)           \
    X(channel_collnetDirect_nHeads) X(channel_collnetDirect_headRank) X(channel_collnetDirect_shift) \
    X(channel_collnetDirect_heads) X(channel_collnetDirect_up) X(channel_collnetDirect_down)       \
    X(channel_nvls_out) X(channel_nvls_nHeads) X(channel_nvls_headRank) X(channel_nvls_up)         \
    X(channel_nvls_down) X(channel_nvls_treeUp) X(channel_nvls_treeDown)                           \
    /* ncclDevChannelPeer: send[NCCL_MAX_CONNS], recv[NCCL_MAX_CONNS] of ncclConnInfo */           \
    X(peer) X(peer_send) X(peer_recv)                                                              \
    /* ncclConnInfo */                                                                             \
    X(conn) X(conn_buffs) X(conn_mhandles) X(conn_tail) X(conn_head) X(conn_flags) X(conn_shared)  \
    X(conn_stepSize) X(conn_ptrExchange) X(conn_redOpArgExchange) X(conn_connFifo) X(conn_step)    \
    X(conn_llLastCleaning) X(conn_netDeviceHandle)                                                 \
    /* ncclConnFifo, ncclLLFifoLine */                                                             \
    X(connFifo) X(connFifo_mode) X(connFifo_offset) X(connFifo_size) X(connFifo_ptr) X(llLine)

/* JSON "const.a.b" -> member a_b (int). */
#define FC_NCCL_CONSTS(X)                                                                          \
    X(NCCL_STEPS) X(NCCL_NUM_PROTOCOLS) X(MAXCHANNELS) X(NCCL_MAX_CONNS) X(NCCL_MAX_TREE_ARITY)    \
    X(NCCL_MAX_NVLS_ARITY) X(NCCL_MAX_NVLS_TREE_ARITY) X(NCCL_MAX_DIRECT_ARITY)                    \
    X(ALLREDUCE_SLICESTEPS) X(ALLREDUCE_CHUNKSTEPS) X(ALLGATHER_SLICESTEPS)                        \
    X(ALLGATHER_CHUNKSTEPS) X(REDUCESCATTER_SLICESTEPS) X(REDUCESCATTER_CHUNKSTEPS)                \
    X(BROADCAST_SLICESTEPS) X(BROADCAST_CHUNKSTEPS) X(REDUCE_SLICESTEPS) X(REDUCE_CHUNKSTEPS)      \
    X(NCCL_LL128_LINESIZE) X(NCCL_MAX_DEV_WORK_P2P_PER_BATCH) X(NCCL_MAX_DEV_WORK_BATCH_BYTES)     \
    X(grain_LL) X(grain_LL128) X(grain_SIMPLE)                                                     \
    /* 1: a P2P work's part on a channel is bit-reversed (ncclP2pChannelToPart, <= 2.27) */        \
    X(P2P_PART_BITREVERSE)                                                                         \
    /* entries per channel of ncclDevProfiler (2.27+); 0: a plain uint64_t counter per channel */  \
    X(MAX_PROFILER_EVENTS_PER_CHANNEL)                                                             \
    /* 1: a Simple receiver also writes connFifo[step].size of its connection (2.23) */            \
    X(SIMPLE_RECV_SETS_FIFO_SIZE)                                                                  \
    /* PAT's groups of workers at most (NCCL_PAT_NWORKERS / WARP_SIZE, 2.26+); 0: the older,      \
     * sequential PAT kernel (2.23-2.25), whose ReduceScatter steps differ (pat.c) */              \
    X(PAT_PARALLEL_FACTOR)

typedef struct fc_nccl_layout {
#define FC_NCCL_FIELD_MEMBER_(n) fc_nccl_field n;
    FC_NCCL_FIELDS(FC_NCCL_FIELD_MEMBER_)
#undef FC_NCCL_FIELD_MEMBER_
#define FC_NCCL_CONST_MEMBER_(n) int n;
    FC_NCCL_CONSTS(FC_NCCL_CONST_MEMBER_)
#undef FC_NCCL_CONST_MEMBER_
} fc_nccl_layout;

/* The parts of a device function's name ("AllReduce_Sum_f32_RING_LL"). The
 * order of algorithms, protocols and types is NCCL's own numbering
 * (NCCL_ALGO_*, NCCL_PROTO_*, ncclDataType_t, ncclDevRedOp_t); collectives are
 * ours (NCCL's ncclFunc_t numbering moved between releases). */
#define FC_NCCL_COLLS(X) X(Broadcast) X(Reduce) X(AllGather) X(AllGatherV) X(ReduceScatter) \
    X(AllReduce) X(SendRecv) X(Nop)
#define FC_NCCL_REDOPS(X) X(Sum) X(Prod) X(MinMax) X(PreMulSum) X(SumPostDiv)
#define FC_NCCL_TYPES(X) X(i8) X(u8) X(i32) X(u32) X(i64) X(u64) X(f16) X(f32) X(f64) X(bf16) \
    X(f8e4m3) X(f8e5m2)
#define FC_NCCL_ALGOS(X) X(TREE) X(RING) X(COLLNET_DIRECT) X(COLLNET_CHAIN) X(NVLS) X(NVLS_TREE) X(PAT)
#define FC_NCCL_PROTOS(X) X(LL) X(LL128) X(SIMPLE)

#define FC_NCCL_ENUM_(prefix, n) FC_NCCL_##prefix##_##n,
#define FC_NCCL_COLL_(n) FC_NCCL_ENUM_(COLL, n)
#define FC_NCCL_REDOP_(n) FC_NCCL_ENUM_(REDOP, n)
#define FC_NCCL_TYPE_(n) FC_NCCL_ENUM_(TYPE, n)
#define FC_NCCL_ALGO_(n) FC_NCCL_ENUM_(ALGO, n)
#define FC_NCCL_PROTO_(n) FC_NCCL_ENUM_(PROTO, n)
enum { FC_NCCL_COLLS(FC_NCCL_COLL_) FC_NCCL_NUM_COLLS };
enum { FC_NCCL_REDOPS(FC_NCCL_REDOP_) FC_NCCL_NUM_REDOPS };
enum { FC_NCCL_TYPES(FC_NCCL_TYPE_) FC_NCCL_NUM_TYPES };
enum { FC_NCCL_ALGOS(FC_NCCL_ALGO_) FC_NCCL_NUM_ALGOS };
enum { FC_NCCL_PROTOS(FC_NCCL_PROTO_) FC_NCCL_NUM_PROTOS };

/* Work types of ncclDevWorkBatch.workType (enum ncclDevWorkType). */
enum { FC_NCCL_WORK_P2P = 0, FC_NCCL_WORK_COLL = 1, FC_NCCL_WORK_COLLREG = 2, FC_NCCL_WORK_BCAST = 3 };

/* One entry of a release's device-function list; -1: not part of the name. */
typedef struct {
    const char *name;
    int8_t coll, redop, type, algo, proto;
} fc_nccl_func;

typedef struct {
    const char *version; /* "2.30.7" */
    int code;            /* what ncclGetVersion answers: 23007 */
    const fc_nccl_layout *layout;
    const fc_nccl_func *funcs; /* indexed by ncclDevWorkBatch.funcId */
    int nfuncs;
    const char *wheels; /* "cu12,cu13": the PyPI flavours that ship it ("" for a tag only) */
} fc_nccl_release;

/* Generated: every release, oldest first. */
extern const fc_nccl_release fc_nccl_releases[];
extern const int fc_nccl_release_count;

#endif
