/* Copies and memsets. Simulated device memory is host memory at the same
 * address, so every copy is a memmove; what differs between the variants is
 * only which stream orders them and whether the caller waits. CUDA arrays
 * are not simulated: copies that name one fail with CUDA_ERROR_NOT_SUPPORTED. */
#include <fcntl.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "zero_runs.h"

/* ---- operations run in stream order ---- */

struct copy_op {
    void *dst;
    const void *src;
    size_t n;
};
static void run_copy(void *arg)
{
    struct copy_op *o = arg;
    memmove(o->dst, o->src, o->n);
    fc_time_copy(o->dst, o->src, o->n);
}

struct copy2d_op {
    char *dst;
    const char *src;
    size_t dpitch, spitch, width, height, depth, dslice, sslice;
};
static void run_copy2d(void *arg)
{
    struct copy2d_op *o = arg;
    for (size_t z = 0; z < o->depth; z++)
        for (size_t y = 0; y < o->height; y++)
            memmove(o->dst + z * o->dslice + y * o->dpitch, o->src + z * o->sslice + y * o->spitch,
                    o->width);
    fc_time_copy(o->dst, o->src, o->width * o->height * o->depth);
}

struct set_op {
    char *dst;
    unsigned value;
    unsigned elem;  /* 1, 2 or 4 bytes */
    size_t count;   /* elements per row */
    size_t pitch, height;
};
/* Zeroing a large range of device memory takes no memory where none is in
 * use (zero_runs.h): NCCL zeroes every buffer it allocates, which written
 * page by page would fill a simulated cluster's RAM. A punched hole reads as
 * zeros in this process and in every process that maps the same memory. */
#define HOLE_MIN (1u << 20)

typedef struct {
    int fd;
    char *at;     /* mapped at offset `off` of the file */
    size_t off;
} backing;

static bool write_zeros(char *run, size_t bytes, void *ctx)
{
    (void)ctx;
    memset(run, 0, bytes);
    return true;
}

static bool punch(char *run, size_t bytes, void *ctx)
{
    const backing *b = ctx;
    off_t at = (off_t)(b->off + (size_t)(run - b->at));
    return fallocate(b->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, at, (off_t)bytes) == 0;
}

/* false: not a large range of a file (the caller writes it). */
static bool zero_large(char *dst, size_t len)
{
    backing b;
    if (len < HOLE_MIN || !fc_backing_fd((uintptr_t)dst, len, &b.fd, &b.off)) return false;
    size_t page = 4096, head = (page - b.off % page) % page;
    size_t body = (len - head) / page * page;
    b.at = dst + head;
    b.off += head;
    fc_zero_runs(b.at, body / page, page, write_zeros, punch, &b);
    memset(dst, 0, head);
    memset(dst + head + body, 0, len - head - body);
    return true;
}

static void run_set(void *arg)
{
    struct set_op *o = arg;
    if (o->value == 0 && o->height == 1 && zero_large(o->dst, o->count * o->elem)) return;
    for (size_t y = 0; y < o->height; y++) {
        char *row = o->dst + y * o->pitch;
        if (o->elem == 1) {
            memset(row, (int)(o->value & 0xff), o->count);
        } else if (o->elem == 2) {
            uint16_t v = (uint16_t)o->value, *p = (uint16_t *)(void *)row;
            for (size_t i = 0; i < o->count; i++) p[i] = v;
        } else {
            uint32_t v = o->value, *p = (uint32_t *)(void *)row;
            for (size_t i = 0; i < o->count; i++) p[i] = v;
        }
    }
}

/* Enqueue and, for the synchronous variants, wait for the stream. */
static CUresult submit(CUstream h, bool ptds, bool async, fc_op_fn fn, const void *arg, size_t size)
{
    struct CUstream_st *s;
    CUresult r = fc_stream_resolve(h, ptds, &s);
    if (r != CUDA_SUCCESS) return r;
    if (!fc_stream_enqueue(s, fn, arg, size, true)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!async) fc_stream_wait_idle(s);
    return CUDA_SUCCESS;
}

/* Pageable host memory: the driver knows nothing of it. */
static bool pageable(const void *p) { return !fc_registry_find((uintptr_t)p, NULL); }

static CUresult copy(void *dst, const void *src, size_t n, CUstream h, bool ptds, bool async)
{
    if (n == 0) return CUDA_SUCCESS;
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    /* As on a GPU, an "async" copy from or to pageable memory has finished
     * with that memory when the call returns. */
    if (async && (pageable(src) || pageable(dst))) async = false;
    struct copy_op o = {dst, src, n};
    return submit(h, ptds, async, run_copy, &o, sizeof o);
}

#define P(x) ((void *)(uintptr_t)(x))

/* Linear copies: (name, destination, source) -> sync, _ptds, async, _ptsz. */
#define COPY_SYNC(name, dtype, stype, sym, ptsym)                                                 \
    FC_API CUresult sym(dtype dst, stype src, size_t n)                                           \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(copy(P(dst), P(src), n, NULL, false, false), "\"bytes\":%zu", n);              \
    }                                                                                             \
    FC_API CUresult ptsym(dtype dst, stype src, size_t n)                                         \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(copy(P(dst), P(src), n, NULL, true, false), "\"bytes\":%zu", n);               \
    }
#define COPY_ASYNC(dtype, stype, sym, ptsym)                                                      \
    FC_API CUresult sym(dtype dst, stype src, size_t n, CUstream h)                               \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(copy(P(dst), P(src), n, h, false, true), "\"bytes\":%zu", n);                  \
    }                                                                                             \
    FC_API CUresult ptsym(dtype dst, stype src, size_t n, CUstream h)                             \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(copy(P(dst), P(src), n, h, true, true), "\"bytes\":%zu", n);                   \
    }

COPY_SYNC(cuMemcpy, CUdeviceptr, CUdeviceptr, cuMemcpy, cuMemcpy_ptds)
COPY_SYNC(HtoD, CUdeviceptr, const void *, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds)
COPY_SYNC(DtoH, void *, CUdeviceptr, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds)
COPY_SYNC(DtoD, CUdeviceptr, CUdeviceptr, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds)
COPY_ASYNC(CUdeviceptr, CUdeviceptr, cuMemcpyAsync, cuMemcpyAsync_ptsz)
COPY_ASYNC(CUdeviceptr, const void *, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz)
COPY_ASYNC(void *, CUdeviceptr, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz)
COPY_ASYNC(CUdeviceptr, CUdeviceptr, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz)

/* Peer copies: the contexts only say which devices; the bytes are in one address space. */
FC_API CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
    REQUIRE_INIT();
    if (!fc_valid_ctx(dctx) || !fc_valid_ctx(sctx)) API_RETURN(CUDA_ERROR_INVALID_CONTEXT, "");
    API_RETURN(copy(P(dst), P(src), n, NULL, false, false), "\"bytes\":%zu", n);
}
FC_API CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
    REQUIRE_INIT();
    if (!fc_valid_ctx(dctx) || !fc_valid_ctx(sctx)) API_RETURN(CUDA_ERROR_INVALID_CONTEXT, "");
    API_RETURN(copy(P(dst), P(src), n, NULL, true, false), "\"bytes\":%zu", n);
}
FC_API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                                  size_t n, CUstream h)
{
    REQUIRE_INIT();
    if (!fc_valid_ctx(dctx) || !fc_valid_ctx(sctx)) API_RETURN(CUDA_ERROR_INVALID_CONTEXT, "");
    API_RETURN(copy(P(dst), P(src), n, h, false, true), "\"bytes\":%zu", n);
}
FC_API CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src,
                                       CUcontext sctx, size_t n, CUstream h)
{
    REQUIRE_INIT();
    if (!fc_valid_ctx(dctx) || !fc_valid_ctx(sctx)) API_RETURN(CUDA_ERROR_INVALID_CONTEXT, "");
    API_RETURN(copy(P(dst), P(src), n, h, true, true), "\"bytes\":%zu", n);
}

/* ---- 2D / 3D ---- */

/* Address of a 2D/3D operand, or NULL for CUDA arrays (not simulated). */
static const char *operand(CUmemorytype type, const void *host, CUdeviceptr dev, CUarray array)
{
    (void)array;
    switch (type) {
    case CU_MEMORYTYPE_HOST: return host;
    case CU_MEMORYTYPE_DEVICE: return P(dev);
    case CU_MEMORYTYPE_UNIFIED: return P(dev);
    default: return NULL;
    }
}

static CUresult copy2d(const CUDA_MEMCPY2D *p, CUstream h, bool ptds, bool async)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return CUDA_ERROR_NOT_SUPPORTED;
    const char *s = operand(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray);
    char *d = (char *)operand(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray);
    if (!s || !d) return CUDA_ERROR_INVALID_VALUE;
    size_t sp = p->srcPitch ? p->srcPitch : p->WidthInBytes, dp = p->dstPitch ? p->dstPitch : p->WidthInBytes;
    if (sp < p->WidthInBytes || dp < p->WidthInBytes) return CUDA_ERROR_INVALID_VALUE;
    struct copy2d_op o = {d + p->dstY * dp + p->dstXInBytes, s + p->srcY * sp + p->srcXInBytes,
                          dp, sp, p->WidthInBytes, p->Height, 1, 0, 0};
    return submit(h, ptds, async, run_copy2d, &o, sizeof o);
}

FC_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p)
{
    REQUIRE_INIT();
    API_RETURN(copy2d(p, NULL, false, false), "");
}
FC_API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p)
{
    REQUIRE_INIT();
    API_RETURN(copy2d(p, NULL, true, false), "");
}
FC_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p)
{
    REQUIRE_INIT();
    API_RETURN(copy2d(p, NULL, false, false), "");
}
FC_API CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p)
{
    REQUIRE_INIT();
    API_RETURN(copy2d(p, NULL, true, false), "");
}
FC_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream h)
{
    REQUIRE_INIT();
    API_RETURN(copy2d(p, h, false, true), "");
}
FC_API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream h)
{
    REQUIRE_INIT();
    API_RETURN(copy2d(p, h, true, true), "");
}

static CUresult copy3d(const CUDA_MEMCPY3D *p, CUstream h, bool ptds, bool async)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return CUDA_ERROR_NOT_SUPPORTED;
    const char *s = operand(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray);
    char *d = (char *)operand(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray);
    if (!s || !d) return CUDA_ERROR_INVALID_VALUE;
    size_t sp = p->srcPitch ? p->srcPitch : p->WidthInBytes, dp = p->dstPitch ? p->dstPitch : p->WidthInBytes;
    size_t sh = p->srcHeight ? p->srcHeight : p->Height, dh = p->dstHeight ? p->dstHeight : p->Height;
    struct copy2d_op o = {d + (p->dstZ * dh + p->dstY) * dp + p->dstXInBytes,
                          s + (p->srcZ * sh + p->srcY) * sp + p->srcXInBytes,
                          dp, sp, p->WidthInBytes, p->Height, p->Depth ? p->Depth : 1, dp * dh, sp * sh};
    return submit(h, ptds, async, run_copy2d, &o, sizeof o);
}

FC_API CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p)
{
    REQUIRE_INIT();
    API_RETURN(copy3d(p, NULL, false, false), "");
}
FC_API CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *p)
{
    REQUIRE_INIT();
    API_RETURN(copy3d(p, NULL, true, false), "");
}
FC_API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream h)
{
    REQUIRE_INIT();
    API_RETURN(copy3d(p, h, false, true), "");
}
FC_API CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *p, CUstream h)
{
    REQUIRE_INIT();
    API_RETURN(copy3d(p, h, true, true), "");
}

/* ---- memsets ---- */

static CUresult set(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem, size_t count,
                    size_t height, CUstream h, bool ptds, bool async)
{
    if (count == 0 || height == 0) return CUDA_SUCCESS;
    if (!dst || (dst % elem) || (height > 1 && pitch < count * elem)) return CUDA_ERROR_INVALID_VALUE;
    struct set_op o = {P(dst), value, elem, count, height > 1 ? pitch : 0, height};
    return submit(h, ptds, async, run_set, &o, sizeof o);
}

#define SET1D(bits, vtype, sym, ptsym, asym, aptsym)                                              \
    FC_API CUresult sym(CUdeviceptr d, vtype v, size_t n)                                         \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(set(d, 0, v, bits / 8, n, 1, NULL, false, false), "\"count\":%zu", n);         \
    }                                                                                             \
    FC_API CUresult ptsym(CUdeviceptr d, vtype v, size_t n)                                       \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(set(d, 0, v, bits / 8, n, 1, NULL, true, false), "\"count\":%zu", n);          \
    }                                                                                             \
    FC_API CUresult asym(CUdeviceptr d, vtype v, size_t n, CUstream h)                            \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(set(d, 0, v, bits / 8, n, 1, h, false, true), "\"count\":%zu", n);            \
    }                                                                                             \
    FC_API CUresult aptsym(CUdeviceptr d, vtype v, size_t n, CUstream h)                          \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(set(d, 0, v, bits / 8, n, 1, h, true, true), "\"count\":%zu", n);             \
    }

SET1D(8, unsigned char, cuMemsetD8_v2, cuMemsetD8_v2_ptds, cuMemsetD8Async, cuMemsetD8Async_ptsz)
SET1D(16, unsigned short, cuMemsetD16_v2, cuMemsetD16_v2_ptds, cuMemsetD16Async, cuMemsetD16Async_ptsz)
SET1D(32, unsigned int, cuMemsetD32_v2, cuMemsetD32_v2_ptds, cuMemsetD32Async, cuMemsetD32Async_ptsz)

#define SET2D(bits, vtype, sym, ptsym, asym, aptsym)                                              \
    FC_API CUresult sym(CUdeviceptr d, size_t pitch, vtype v, size_t w, size_t hgt)               \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(set(d, pitch, v, bits / 8, w, hgt, NULL, false, false), "\"w\":%zu", w);       \
    }                                                                                             \
    FC_API CUresult ptsym(CUdeviceptr d, size_t pitch, vtype v, size_t w, size_t hgt)             \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(set(d, pitch, v, bits / 8, w, hgt, NULL, true, false), "\"w\":%zu", w);        \
    }                                                                                             \
    FC_API CUresult asym(CUdeviceptr d, size_t pitch, vtype v, size_t w, size_t hgt, CUstream h)  \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(set(d, pitch, v, bits / 8, w, hgt, h, false, true), "\"w\":%zu", w);          \
    }                                                                                             \
    FC_API CUresult aptsym(CUdeviceptr d, size_t pitch, vtype v, size_t w, size_t hgt, CUstream h) \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(set(d, pitch, v, bits / 8, w, hgt, h, true, true), "\"w\":%zu", w);           \
    }

SET2D(8, unsigned char, cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds, cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz)
SET2D(16, unsigned short, cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds, cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz)
SET2D(32, unsigned int, cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds, cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz)

/* ---- stream memory operations (32/64-bit waits and writes) ---- */

struct value_op {
    volatile void *addr;
    uint64_t value;
    unsigned flags;
    bool wait, is64;
};

static bool value_ready(const struct value_op *o)
{
    uint64_t cur = o->is64 ? *(volatile uint64_t *)o->addr : *(volatile uint32_t *)o->addr;
    uint64_t v = o->is64 ? o->value : (uint32_t)o->value;
    switch (o->flags & 0x3) {
    case CU_STREAM_WAIT_VALUE_GEQ: return o->is64 ? (int64_t)(cur - v) >= 0 : (int32_t)(uint32_t)(cur - v) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return cur == v;
    case CU_STREAM_WAIT_VALUE_AND: return (cur & v) != 0;
    case CU_STREAM_WAIT_VALUE_NOR: return ~(cur | v) & (o->is64 ? ~0ull : 0xffffffffull);
    }
    return true;
}

static void run_value(void *arg)
{
    struct value_op *o = arg;
    if (o->wait) {
        /* Another process or thread writes it; poll politely. */
        for (unsigned spins = 0; !value_ready(o); spins++) {
            if (spins < 1000) __builtin_ia32_pause();
            else {
                struct timespec ts = {0, 20000};
                nanosleep(&ts, NULL);
            }
        }
    } else if (o->is64) {
        __atomic_store_n((uint64_t *)o->addr, o->value, __ATOMIC_SEQ_CST);
    } else {
        __atomic_store_n((uint32_t *)o->addr, (uint32_t)o->value, __ATOMIC_SEQ_CST);
    }
}

static CUresult value_op(CUstream h, CUdeviceptr addr, uint64_t value, unsigned flags, bool wait,
                         bool is64, bool ptds)
{
    if (!addr || addr % (is64 ? 8 : 4)) return CUDA_ERROR_INVALID_VALUE;
    struct value_op o = {P(addr), value, flags, wait, is64};
    struct CUstream_st *s;
    CUresult r = fc_stream_resolve(h, ptds, &s);
    if (r != CUDA_SUCCESS) return r;
    /* A write cannot block; a wait can, so it always goes to the worker. */
    return fc_stream_enqueue(s, run_value, &o, sizeof o, !wait) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

#define VALUE_FN(sym, vtype, wait, is64, ptds)                                                    \
    FC_API CUresult sym(CUstream h, CUdeviceptr addr, vtype value, unsigned int flags)            \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(value_op(h, addr, value, flags, wait, is64, ptds),                             \
                   "\"addr\":\"0x%llx\",\"value\":%llu", (unsigned long long)addr,                \
                   (unsigned long long)value);                                                    \
    }
VALUE_FN(cuStreamWaitValue32, cuuint32_t, true, false, false)
VALUE_FN(cuStreamWaitValue32_ptsz, cuuint32_t, true, false, true)
VALUE_FN(cuStreamWaitValue32_v2, cuuint32_t, true, false, false)
VALUE_FN(cuStreamWaitValue32_v2_ptsz, cuuint32_t, true, false, true)
VALUE_FN(cuStreamWaitValue64, cuuint64_t, true, true, false)
VALUE_FN(cuStreamWaitValue64_ptsz, cuuint64_t, true, true, true)
VALUE_FN(cuStreamWaitValue64_v2, cuuint64_t, true, true, false)
VALUE_FN(cuStreamWaitValue64_v2_ptsz, cuuint64_t, true, true, true)
VALUE_FN(cuStreamWriteValue32, cuuint32_t, false, false, false)
VALUE_FN(cuStreamWriteValue32_ptsz, cuuint32_t, false, false, true)
VALUE_FN(cuStreamWriteValue32_v2, cuuint32_t, false, false, false)
VALUE_FN(cuStreamWriteValue32_v2_ptsz, cuuint32_t, false, false, true)
VALUE_FN(cuStreamWriteValue64, cuuint64_t, false, true, false)
VALUE_FN(cuStreamWriteValue64_ptsz, cuuint64_t, false, true, true)
VALUE_FN(cuStreamWriteValue64_v2, cuuint64_t, false, true, false)
VALUE_FN(cuStreamWriteValue64_v2_ptsz, cuuint64_t, false, true, true)

static CUresult batch(CUstream h, unsigned count, CUstreamBatchMemOpParams *ops, unsigned flags, bool ptds)
{
    if (flags || (count && !ops)) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < count; i++) {
        CUstreamBatchMemOpParams *p = &ops[i];
        CUresult r;
        switch (p->operation) {
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
            bool is64 = p->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
            r = value_op(h, p->waitValue.address, is64 ? p->waitValue.value64 : p->waitValue.value,
                         p->waitValue.flags, true, is64, ptds);
            break;
        }
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
            bool is64 = p->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
            r = value_op(h, p->writeValue.address, is64 ? p->writeValue.value64 : p->writeValue.value,
                         p->writeValue.flags, false, is64, ptds);
            break;
        }
        case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
        case CU_STREAM_MEM_OP_BARRIER: r = CUDA_SUCCESS; break; /* host memory: already coherent */
        default: r = CUDA_ERROR_NOT_SUPPORTED;
        }
        if (r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
}

#define BATCH_FN(sym, ptds)                                                                       \
    FC_API CUresult sym(CUstream h, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags) \
    {                                                                                             \
        REQUIRE_INIT();                                                                           \
        API_RETURN(batch(h, count, ops, flags, ptds), "\"count\":%u", count);                     \
    }
BATCH_FN(cuStreamBatchMemOp, false)
BATCH_FN(cuStreamBatchMemOp_ptsz, true)
BATCH_FN(cuStreamBatchMemOp_v2, false)
BATCH_FN(cuStreamBatchMemOp_v2_ptsz, true)
