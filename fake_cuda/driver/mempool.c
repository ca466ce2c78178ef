/* Memory pools and stream-ordered allocation. An allocation is made at once
 * (the memory exists before the stream reaches it, which no correct program
 * can observe); a free happens when the stream reaches it. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct CUmemPoolHandle_st {
    uint32_t magic;
    CUmemPoolProps props;
    cuuint64_t release_threshold;
    int reuse_follow_event, reuse_opportunistic, reuse_internal;
    atomic_size_t used, used_high;
};
#define POOL_MAGIC 0x706f6f6cu

static struct CUmemPoolHandle_st default_pool[FC_MAX_GPUS];
static CUmemoryPool current_pool[FC_MAX_GPUS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static bool valid_pool(CUmemoryPool p) { return p && p->magic == POOL_MAGIC; }

static void pool_init(CUmemoryPool p, const CUmemPoolProps *props)
{
    p->magic = POOL_MAGIC;
    p->props = *props;
    p->reuse_follow_event = p->reuse_opportunistic = p->reuse_internal = 1;
}

static CUmemoryPool device_default(CUdevice dev)
{
    pthread_mutex_lock(&pool_lock);
    CUmemoryPool p = &default_pool[dev];
    if (p->magic != POOL_MAGIC) {
        CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, dev}};
        pool_init(p, &props);
    }
    pthread_mutex_unlock(&pool_lock);
    return p;
}

FC_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    REQUIRE_INIT();
    if (!pool_out) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!fc_valid_device(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "\"dev\":%d", dev);
    *pool_out = device_default(dev);
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d", dev);
}

FC_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    REQUIRE_INIT();
    if (!pool) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!fc_valid_device(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "\"dev\":%d", dev);
    pthread_mutex_lock(&pool_lock);
    CUmemoryPool p = current_pool[dev];
    pthread_mutex_unlock(&pool_lock);
    *pool = p ? p : device_default(dev);
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d", dev);
}

FC_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    REQUIRE_INIT();
    if (!fc_valid_device(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "\"dev\":%d", dev);
    if (!valid_pool(pool) || pool->props.location.id != dev) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    pthread_mutex_lock(&pool_lock);
    current_pool[dev] = pool;
    pthread_mutex_unlock(&pool_lock);
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d", dev);
}

FC_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    REQUIRE_INIT();
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fc_valid_device(props->location.id))
        API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "\"location\":%d", props->location.type);
    CUmemoryPool p = calloc(1, sizeof *p);
    if (!p) API_RETURN(CUDA_ERROR_OUT_OF_MEMORY, "");
    pool_init(p, props);
    *pool = p;
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d", props->location.id);
}

FC_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    REQUIRE_INIT();
    if (!valid_pool(pool) || pool == &default_pool[pool->props.location.id])
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    pthread_mutex_lock(&pool_lock);
    for (int d = 0; d < FC_MAX_GPUS; d++)
        if (current_pool[d] == pool) current_pool[d] = NULL;
    pthread_mutex_unlock(&pool_lock);
    pool->magic = 0; /* outstanding allocations stay valid until freed */
    API_RETURN(CUDA_SUCCESS, "");
}

FC_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    REQUIRE_INIT();
    if (!valid_pool(pool) || !value) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: pool->reuse_follow_event = *(int *)value; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: pool->reuse_opportunistic = *(int *)value; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: pool->reuse_internal = *(int *)value; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: pool->release_threshold = *(cuuint64_t *)value; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
        atomic_store(&pool->used_high, atomic_load(&pool->used));
        break;
    default: API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"attr\":%d", attr);
    }
    API_RETURN(CUDA_SUCCESS, "\"attr\":%d", attr);
}

FC_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    REQUIRE_INIT();
    if (!valid_pool(pool) || !value) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: *(int *)value = pool->reuse_follow_event; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: *(int *)value = pool->reuse_opportunistic; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *(int *)value = pool->reuse_internal; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = pool->release_threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = atomic_load(&pool->used); break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = atomic_load(&pool->used_high); break;
    default: API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"attr\":%d", attr);
    }
    API_RETURN(CUDA_SUCCESS, "\"attr\":%d", attr);
}

FC_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    REQUIRE_INIT();
    if (!valid_pool(pool) || (count && !map)) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    API_RETURN(CUDA_SUCCESS, "\"count\":%zu", count); /* every device already has access */
}

FC_API CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *location)
{
    REQUIRE_INIT();
    if (!flags || !valid_pool(pool) || !location) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    API_RETURN(CUDA_SUCCESS, "");
}

FC_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    REQUIRE_INIT();
    if (!valid_pool(pool)) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    API_RETURN(CUDA_SUCCESS, "\"keep\":%zu", minBytesToKeep); /* freed memory is returned at once */
}

/* ---- stream-ordered allocation ---- */

static CUresult alloc_from(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h, bool ptds)
{
    if (!dptr || !valid_pool(pool)) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult r = fc_stream_resolve(h, ptds, &s);
    if (r != CUDA_SUCCESS) return r;
    r = fc_device_alloc(pool->props.location.id, size, dptr);
    if (r != CUDA_SUCCESS) return r;
    fc_alloc a;
    fc_registry_remove(*dptr, &a);
    a.pool = pool;
    fc_registry_add(&a);
    size_t now = atomic_fetch_add(&pool->used, a.size) + a.size, high = atomic_load(&pool->used_high);
    while (now > high && !atomic_compare_exchange_weak(&pool->used_high, &high, now)) {}
    return CUDA_SUCCESS;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream h, bool ptds)
{
    struct CUstream_st *s;
    CUresult r = fc_stream_resolve(h, ptds, &s);
    if (r != CUDA_SUCCESS) return r;
    CUmemoryPool pool;
    pthread_mutex_lock(&pool_lock);
    pool = current_pool[s->ctx->device];
    pthread_mutex_unlock(&pool_lock);
    return alloc_from(dptr, size, pool ? pool : device_default(s->ctx->device), h, ptds);
}

FC_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream h)
{
    REQUIRE_INIT();
    API_RETURN(alloc_async(dptr, bytesize, h, false), "\"bytes\":%zu", bytesize);
}
FC_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream h)
{
    REQUIRE_INIT();
    API_RETURN(alloc_async(dptr, bytesize, h, true), "\"bytes\":%zu", bytesize);
}
FC_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream h)
{
    REQUIRE_INIT();
    API_RETURN(alloc_from(dptr, bytesize, pool, h, false), "\"bytes\":%zu", bytesize);
}
FC_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream h)
{
    REQUIRE_INIT();
    API_RETURN(alloc_from(dptr, bytesize, pool, h, true), "\"bytes\":%zu", bytesize);
}

static void run_free(void *arg)
{
    CUdeviceptr p = *(CUdeviceptr *)arg;
    fc_alloc a;
    if (fc_registry_find(p, &a) && a.pool) atomic_fetch_sub(&a.pool->used, a.size);
    fc_device_free(p);
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, bool ptds)
{
    fc_alloc a;
    if (!fc_registry_find(dptr, &a) || a.base != dptr || a.kind != FC_MEM_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult r = fc_stream_resolve(h, ptds, &s);
    if (r != CUDA_SUCCESS) return r;
    return fc_stream_enqueue(s, run_free, &dptr, sizeof dptr, true) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FC_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream h)
{
    REQUIRE_INIT();
    API_RETURN(free_async(dptr, h, false), "\"ptr\":\"0x%llx\"", (unsigned long long)dptr);
}
FC_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream h)
{
    REQUIRE_INIT();
    API_RETURN(free_async(dptr, h, true), "\"ptr\":\"0x%llx\"", (unsigned long long)dptr);
}
