/* Decoding of an NCCL kernel's argument block with the per-release layout
 * table (see decode.h and layouts/). The control flow mirrors the kernel's
 * prologue (ncclKernelMain, loadWorkBatchToShmem of src/device/common.h):
 * block b runs channel = b-th set bit of channelMask, starts at batch b and
 * follows nextJump; batches with nextExtends are loaded as one. */
#include "decode.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The argument block is at most 4 KiB today (ncclDevKernelArgs4K); accept more
 * in case a release grows it, but never copy an unbounded size. */
#define MAX_ARGS_BYTES (32u << 10)

void fc_nccl_launch_error(fc_nccl_launch *l, const char *fmt, ...)
{
    if (l->error[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->error, sizeof l->error, fmt, ap);
    va_end(ap);
}

/* Grow *arr (of elem bytes) to hold n+1 entries. */
static bool grow(void **arr, int n, int *cap, size_t elem)
{
    if (n < *cap) return true;
    int c = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, (size_t)c * elem);
    if (!p) return false;
    *arr = p;
    *cap = c;
    return true;
}

/* The bytes of one work item: in the argument block (storage 0) or in the
 * work FIFO, read 16 bytes at a time through workMask as the kernel does (an
 * item may wrap around the FIFO's end). */
static bool load_work(fc_nccl_launch *l, uint32_t off, size_t size, unsigned char *dst)
{
    if (l->storage == 0) {
        if ((size_t)off + size > l->args_size) return false;
        memcpy(dst, l->args + off, size);
        return true;
    }
    for (size_t p = 0; p < size; p += 16) {
        uint32_t at = (uint32_t)((off + p) & l->workMask);
        if (!fc_nccl_read(l->workBuf + at, dst + p, size - p < 16 ? size - p : 16)) return false;
    }
    return true;
}

static void decode_work(const fc_nccl_layout *L, int type, const unsigned char *w, fc_nccl_work *out)
{
    memset(out, 0, sizeof *out);
    out->type = (uint8_t)type;
#define G(f) fc_nccl_get(w, L->f)
    if (type == FC_NCCL_WORK_P2P) {
        out->p2p.sendAddr = G(p2p_sendAddr);
        out->p2p.recvAddr = G(p2p_recvAddr);
        out->p2p.sendBytes = G(p2p_sendBytes);
        out->p2p.recvBytes = G(p2p_recvBytes);
        out->p2p.sendRank = (int32_t)G(p2p_sendRank);
        out->p2p.recvRank = (int32_t)G(p2p_recvRank);
        out->p2p.nP2pChannels = G(p2p_nP2pChannels);
        out->p2p.channelBase = G(p2p_channelBase);
        out->p2p.nSendChannels = G(p2p_nSendChannels);
        out->p2p.nRecvChannels = G(p2p_nRecvChannels);
        out->p2p.sendChunkSize_u32fp8 = G(p2p_sendChunkSize_u32fp8);
        out->p2p.recvChunkSize_u32fp8 = G(p2p_recvChunkSize_u32fp8);
        out->p2p.sendProtoLL = G(p2p_sendProtoLL);
        out->p2p.recvProtoLL = G(p2p_recvProtoLL);
        out->p2p.sendNetReg = G(p2p_sendNetReg);
        out->p2p.recvNetReg = G(p2p_recvNetReg);
        out->p2p.sendIpcReg = G(p2p_sendIpcReg);
        out->p2p.recvIpcReg = G(p2p_recvIpcReg);
    } else if (type == FC_NCCL_WORK_BCAST) {
        out->bcast.ringDepth = (int32_t)G(bcast_ringDepth);
        out->bcast.chunkSize = (int32_t)G(bcast_chunkSize);
        out->bcast.sendbuff = G(bcast_sendbuff);
        out->bcast.recvbuff = G(bcast_recvbuff);
        out->bcast.bytes = G(bcast_bytes);
        out->bcast.bytesDone = G(bcast_bytesDone);
    } else { /* Coll; CollReg starts with a Coll */
        if (type == FC_NCCL_WORK_COLLREG) w += L->collreg_coll.off;
        out->coll.channelLo = G(coll_channelLo);
        out->coll.channelHi = G(coll_channelHi);
        out->coll.nWarps = G(coll_nWarps);
        out->coll.direct = G(coll_direct);
        out->coll.redOpArgIsPtr = G(coll_redOpArgIsPtr);
        out->coll.regUsed = G(coll_regUsed);
        out->coll.netRegUsed = G(coll_netRegUsed);
        out->coll.oneNode = G(coll_oneNode);
        out->coll.root = (uint32_t)G(coll_root);
        out->coll.sendbuff = G(coll_sendbuff);
        out->coll.recvbuff = G(coll_recvbuff);
        out->coll.countLo = G(coll_countLo);
        out->coll.countMid = G(coll_countMid);
        out->coll.countHi = G(coll_countHi);
        out->coll.chunkGrainsLo = (uint32_t)G(coll_chunkGrainsLo);
        out->coll.chunkGrainsMid = (uint32_t)G(coll_chunkGrainsMid);
        out->coll.chunkGrainsHi = (uint32_t)G(coll_chunkGrainsHi);
        out->coll.collnetCount = G(coll_collnetCount);
        out->coll.collnetChunkCount = (uint32_t)G(coll_collnetChunkCount);
        out->coll.redOpArg = G(coll_redOpArg);
    }
#undef G
}

static size_t work_size(const fc_nccl_layout *L, int type)
{
    fc_nccl_field f = type == FC_NCCL_WORK_P2P ? L->p2p : type == FC_NCCL_WORK_COLL ? L->coll
                    : type == FC_NCCL_WORK_COLLREG ? L->collreg : L->bcast;
    return f.off < 0 ? 0 : f.size;
}

/* One block's batch list. Bounded: a well-formed list never revisits a batch
 * (nextJump > 0), so more steps than batches means garbage. */
static bool decode_channel(fc_nccl_launch *l, fc_nccl_channel *ch, int block)
{
    const fc_nccl_layout *L = l->rel->layout;
    size_t bsize = L->batch.size, base = L->args.size;
    size_t max_batches = l->args_size > base ? (l->args_size - base) / bsize : 0;
    unsigned char work[1024];
    ch->first_batch = l->nbatches;
    int ix = block;
    for (size_t steps = 0; steps <= max_batches; steps++) {
        if (!grow((void **)&l->batches, l->nbatches, &l->batches_cap, sizeof *l->batches)) return false;
        fc_nccl_batch *b = &l->batches[l->nbatches];
        memset(b, 0, sizeof *b);
        b->first_work = l->nworks;
        for (;;) { /* batches joined by nextExtends */
            if (ix < 0 || (size_t)ix >= max_batches) {
                fc_nccl_launch_error(l, "channel %d: batch %d is outside the %zu-byte argument block", ch->id, ix,
                                     l->args_size);
                return true;
            }
            const unsigned char *bp = l->args + base + (size_t)ix * bsize;
            int jump = (int)fc_nccl_get(bp, L->batch_nextJump);
            bool extends = fc_nccl_get(bp, L->batch_nextExtends);
            b->workType = (uint8_t)fc_nccl_get(bp, L->batch_workType);
            b->funcId = (int)fc_nccl_get(bp, L->batch_funcId);
            uint32_t offBase = (uint32_t)fc_nccl_get(bp, L->batch_offsetBase);
            uint64_t bits = fc_nccl_get(bp, L->batch_offsetBitset);
            size_t wsize = work_size(L, b->workType);
            if (!wsize || wsize > sizeof work) {
                fc_nccl_launch_error(l, "channel %d: work type %d is unknown to NCCL %s", ch->id, b->workType,
                                     l->rel->version);
                return true;
            }
            for (int i = 0; i < 64; i++) {
                if (!(bits >> i & 1)) continue;
                if (!load_work(l, offBase + (uint32_t)i * (uint32_t)wsize, wsize, work)) {
                    fc_nccl_launch_error(l, "channel %d: work item %d of batch %d is not readable", ch->id, i, ix);
                    return true;
                }
                if (!grow((void **)&l->works, l->nworks, &l->works_cap, sizeof *l->works)) return false;
                decode_work(L, b->workType, work, &l->works[l->nworks++]);
            }
            if (!extends) {
                b->nworks = l->nworks - b->first_work;
                b->consumed = offBase + (uint32_t)(64 - (bits ? __builtin_clzll(bits) : 64)) * (uint32_t)wsize;
                b->func = b->funcId < l->rel->nfuncs ? &l->rel->funcs[b->funcId] : NULL;
                if (!b->func)
                    fc_nccl_launch_error(l, "channel %d: funcId %d is beyond NCCL %s's %d functions", ch->id,
                                         b->funcId, l->rel->version, l->rel->nfuncs);
                l->nbatches++;
                ch->nbatches++;
                if (jump == 0) return true;
                ix += jump;
                break;
            }
            if (jump == 0) {
                fc_nccl_launch_error(l, "channel %d: batch %d extends into nothing", ch->id, ix);
                return true;
            }
            ix += jump;
        }
    }
    fc_nccl_launch_error(l, "channel %d: the batch list does not end", ch->id);
    return true;
}

/* Freed launches kept for the next decodes, with their arrays: a launch is
 * decoded on the thread that launches and freed on the stream's, and going
 * through malloc each time cost both threads (an 8-byte AllReduce on 8 x 8:
 * 4-5 % of all samples in malloc and free, with the stream operations and
 * schedulers; chunks freed across threads, merged and consolidated). */
#define KEPT_LAUNCHES 64
#define KEPT_ARGS_BYTES (8u << 10) /* a launch with more is not kept */
#define KEPT_ENTRIES 256           /* nor one with more channels, batches or works */
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static fc_nccl_launch *kept[KEPT_LAUNCHES];
static int nkept;

/* A cleared launch: a kept one (its arrays and their room kept) or a new one. */
static fc_nccl_launch *launch_new(void)
{
    pthread_mutex_lock(&kept_lock);
    fc_nccl_launch *l = nkept ? kept[--nkept] : NULL;
    pthread_mutex_unlock(&kept_lock);
    if (!l) return calloc(1, sizeof *l);
    memset(l, 0, offsetof(fc_nccl_launch, args));
    return l;
}

/* l->args with room for size bytes. */
static bool args_room(fc_nccl_launch *l, size_t size)
{
    if (size <= l->args_cap) return true;
    unsigned char *a = realloc(l->args, size);
    if (!a) return false;
    l->args = a;
    l->args_cap = size;
    return true;
}

/* l->channels with room for n, cleared. */
static bool channels_room(fc_nccl_launch *l, int n)
{
    if (n > l->channels_cap) {
        fc_nccl_channel *c = realloc(l->channels, (size_t)n * sizeof *c);
        if (!c) return false;
        l->channels = c;
        l->channels_cap = n;
    }
    memset(l->channels, 0, (size_t)n * sizeof *l->channels);
    return true;
}

fc_nccl_launch *fc_nccl_decode_args(const fc_nccl_release *rel, const void *args, size_t size, unsigned grid)
{
    static uint64_t launches;
    fc_nccl_launch *l = launch_new();
    if (!l) return NULL;
    const fc_nccl_layout *L = rel->layout;
    l->rel = rel;
    l->serial = __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED);
    l->grid = grid;
    l->rank = l->nRanks = -1;
    if (size > MAX_ARGS_BYTES) size = MAX_ARGS_BYTES;
    if (!args || size < L->args.size) {
        fc_nccl_launch_error(l, "the argument block has %zu bytes, less than ncclDevKernelArgs", args ? size : 0);
        return l;
    }
    if (!args_room(l, size)) goto oom;
    memcpy(l->args, args, size);
    l->args_size = size;
    l->comm = fc_nccl_get(l->args, L->args_comm);
    l->channelMask = fc_nccl_get(l->args, L->args_channelMask);
    l->storage = (uint8_t)fc_nccl_get(l->args, L->args_workStorageType);
    l->workMask = (uint32_t)fc_nccl_get(l->args, L->args_workMask);
    l->workBuf = fc_nccl_get(l->args, L->args_workBuf);
    int n = __builtin_popcountll(l->channelMask);
    if ((unsigned)n != grid) {
        fc_nccl_launch_error(l, "grid.x is %u but channelMask 0x%llx has %d channels", grid,
                             (unsigned long long)l->channelMask, n);
        return l;
    }
    if (l->storage > 2) {
        fc_nccl_launch_error(l, "unknown work storage type %d", l->storage);
        return l;
    }
    if (n && !channels_room(l, n)) goto oom;
    uint64_t mask = l->channelMask;
    for (int b = 0; b < n; b++, mask &= mask - 1) {
        fc_nccl_channel *ch = &l->channels[b];
        ch->id = __builtin_ctzll(mask);
        ch->ring_prev = ch->ring_next = ch->ring_index = ch->tree_up = -1;
        ch->tree_down[0] = ch->tree_down[1] = ch->tree_down[2] = -1;
        if (!decode_channel(l, ch, b)) goto oom;
        l->nchannels++;
    }
    return l;
oom:
    fc_nccl_launch_free(l);
    return NULL;
}

int64_t fc_nccl_coll_count(const fc_nccl_launch *l, const fc_nccl_work *w, int algo)
{
    /* enqueue.cc: NVLS across hosts and CollNet fill `collnet`, the others `cbd` */
    if (algo == FC_NCCL_ALGO_COLLNET_DIRECT || algo == FC_NCCL_ALGO_COLLNET_CHAIN ||
        (algo == FC_NCCL_ALGO_NVLS && l->nNodes > 1))
        return (int64_t)w->coll.collnetCount;
    return fc_nccl_cbd_count(w);
}

void fc_nccl_launch_free(fc_nccl_launch *l)
{
    if (!l) return;
    if (l->args_cap <= KEPT_ARGS_BYTES && l->channels_cap <= KEPT_ENTRIES && l->batches_cap <= KEPT_ENTRIES &&
        l->works_cap <= KEPT_ENTRIES) {
        pthread_mutex_lock(&kept_lock);
        bool keep = nkept < KEPT_LAUNCHES;
        if (keep) kept[nkept++] = l;
        pthread_mutex_unlock(&kept_lock);
        if (keep) return;
    }
    free(l->args);
    free(l->channels);
    free(l->batches);
    free(l->works);
    free(l);
}
