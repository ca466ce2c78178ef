/* Contexts: one primary context per device (retain/release/reset), created
 * contexts, the entry points of the per-thread current-context stack (kept
 * in current_context.c), and context-local storage used by the runtime
 * through its export table. */
#include <stdlib.h>

#include "internal.h"

struct fc_ctx_local {
    void *key, *value;
    fc_ctx_local_dtor dtor;
    struct fc_ctx_local *next;
};

static struct CUctx_st primary[FC_MAX_GPUS];
static unsigned primary_flags[FC_MAX_GPUS];
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

static void ctx_init(CUcontext c, CUdevice dev, bool is_primary, unsigned flags)
{
    c->magic = FC_CTX_MAGIC;
    c->device = dev;
    c->primary = is_primary;
    c->flags = flags;
    c->id = fc_next_id();
    pthread_mutex_init(&c->lock, NULL);
    /* Defaults the real driver reports for these limits. */
    c->limits[CU_LIMIT_STACK_SIZE] = 1024;
    c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
    c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
    c->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
    c->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
    c->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 32;
    c->limits[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0;
    fc_mem_mark_in_use(dev);
}

/* Run and drop the context-local storage destructors (primary context reset
 * or last release, created context destroyed). */
static void ctx_clear_locals(CUcontext c)
{
    pthread_mutex_lock(&c->lock);
    struct fc_ctx_local *l = c->locals;
    c->locals = NULL;
    pthread_mutex_unlock(&c->lock);
    while (l) {
        struct fc_ctx_local *next = l->next;
        if (l->dtor) l->dtor(c, l->key, l->value);
        free(l);
        l = next;
    }
}

CUresult fc_primary_ctx_retain(CUdevice dev, CUcontext *out)
{
    if (fc_check_init() != CUDA_SUCCESS) return CUDA_ERROR_NOT_INITIALIZED;
    if (!fc_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&primary_lock);
    CUcontext c = &primary[dev];
    if (c->magic != FC_CTX_MAGIC) ctx_init(c, dev, true, primary_flags[dev]);
    atomic_fetch_add(&c->refcount, 1);
    pthread_mutex_unlock(&primary_lock);
    *out = c;
    return CUDA_SUCCESS;
}

FC_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (!pctx) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"dev\":%d", dev);
    API_RETURN(fc_primary_ctx_retain(dev, pctx), "\"dev\":%d", dev);
}

static CUresult primary_release(CUdevice dev, bool reset)
{
    if (fc_check_init() != CUDA_SUCCESS) return CUDA_ERROR_NOT_INITIALIZED;
    if (!fc_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    CUcontext c = &primary[dev];
    pthread_mutex_lock(&primary_lock);
    int before = atomic_load(&c->refcount);
    if (before <= 0 && !reset) {
        pthread_mutex_unlock(&primary_lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    atomic_store(&c->refcount, reset ? 0 : before - 1);
    bool deactivated = before > 0 && atomic_load(&c->refcount) == 0;
    pthread_mutex_unlock(&primary_lock);
    if (deactivated) {
        fc_ctx_synchronize(c);
        ctx_clear_locals(c);
    }
    return CUDA_SUCCESS;
}

FC_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    API_RETURN(primary_release(dev, false), "\"dev\":%d", dev);
}

FC_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

FC_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    API_RETURN(primary_release(dev, true), "\"dev\":%d", dev);
}

FC_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

FC_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    REQUIRE_INIT();
    if (!fc_valid_device(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "\"dev\":%d", dev);
    pthread_mutex_lock(&primary_lock);
    primary_flags[dev] = flags;
    if (primary[dev].magic == FC_CTX_MAGIC) primary[dev].flags = flags;
    pthread_mutex_unlock(&primary_lock);
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d,\"flags\":%u", dev, flags);
}

FC_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

FC_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    REQUIRE_INIT();
    if (!flags || !active) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!fc_valid_device(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "\"dev\":%d", dev);
    pthread_mutex_lock(&primary_lock);
    *flags = primary_flags[dev];
    *active = primary[dev].magic == FC_CTX_MAGIC && atomic_load(&primary[dev].refcount) > 0;
    pthread_mutex_unlock(&primary_lock);
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d,\"active\":%d", dev, *active);
}

/* ---- the current-context stack ---- */

FC_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    REQUIRE_INIT();
    if (ctx && ctx->magic != FC_CTX_MAGIC) API_RETURN(CUDA_ERROR_INVALID_CONTEXT, "");
    fc_ctx_set_current(ctx);
    API_RETURN(CUDA_SUCCESS, "\"ctx\":%llu", ctx ? ctx->id : 0ull);
}

FC_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    REQUIRE_INIT();
    if (!pctx) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    *pctx = fc_current_ctx();
    API_RETURN(CUDA_SUCCESS, "\"ctx\":%llu", *pctx ? (*pctx)->id : 0ull);
}

FC_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    REQUIRE_INIT();
    if (!ctx || ctx->magic != FC_CTX_MAGIC) API_RETURN(CUDA_ERROR_INVALID_CONTEXT, "");
    if (!fc_ctx_push(ctx)) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"depth\":%d", FC_CTX_STACK_MAX);
    API_RETURN(CUDA_SUCCESS, "\"ctx\":%llu", ctx->id);
}

FC_API CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }

FC_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    REQUIRE_INIT();
    CUcontext c;
    if (!fc_ctx_pop(&c)) API_RETURN(CUDA_ERROR_INVALID_CONTEXT, "");
    if (pctx) *pctx = c;
    API_RETURN(CUDA_SUCCESS, "\"ctx\":%llu", c ? c->id : 0ull);
}

FC_API CUresult cuCtxPopCurrent(CUcontext *pctx) { return cuCtxPopCurrent_v2(pctx); }

/* ---- created contexts ---- */

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!fc_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    CUcontext c = calloc(1, sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_init(c, dev, false, flags);
    atomic_store(&c->refcount, 1);
    if (!fc_ctx_push(c)) { /* a new context becomes current */
        free(c);
        return CUDA_ERROR_INVALID_VALUE;
    }
    *pctx = c;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    REQUIRE_INIT();
    API_RETURN(ctx_create(pctx, flags, dev), "\"dev\":%d,\"flags\":%u", dev, flags);
}

FC_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return cuCtxCreate_v2(pctx, flags, dev);
}

FC_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n,
                               unsigned int flags, CUdevice dev)
{
    REQUIRE_INIT();
    if (n > 0 && params) API_RETURN(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "\"n\":%d", n);
    API_RETURN(ctx_create(pctx, flags, dev), "\"dev\":%d,\"flags\":%u", dev, flags);
}

FC_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                               CUdevice dev)
{
    REQUIRE_INIT();
    if (params && (params->execAffinityParams || params->cigParams))
        API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "\"dev\":%d", dev);
    API_RETURN(ctx_create(pctx, flags, dev), "\"dev\":%d,\"flags\":%u", dev, flags);
}

FC_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    REQUIRE_INIT();
    if (!ctx || ctx->magic != FC_CTX_MAGIC || ctx->primary)
        API_RETURN(CUDA_ERROR_INVALID_CONTEXT, "");
    fc_ctx_synchronize(ctx);
    ctx_clear_locals(ctx);
    fc_ctx_forget(ctx); /* other threads must not use it any more */
    unsigned long long id = ctx->id;
    ctx->magic = 0; /* the memory is kept: stale handles fail the magic check */
    API_RETURN(CUDA_SUCCESS, "\"ctx\":%llu", id);
}

FC_API CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }

FC_API CUresult cuCtxDetach(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }

/* `ctx`, or the current context when it is NULL (CUDA 13's _v2 entry points). */
static CUresult given_or_current(CUcontext ctx, CUcontext *out)
{
    if (!ctx) return fc_ctx_current_checked(out);
    if (ctx->magic != FC_CTX_MAGIC) return CUDA_ERROR_INVALID_CONTEXT;
    *out = ctx;
    return CUDA_SUCCESS;
}

FC_API CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    REQUIRE_INIT();
    CUcontext c;
    if (!device) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CUresult r = given_or_current(ctx, &c);
    if (r == CUDA_SUCCESS) *device = c->device;
    API_RETURN(r, "\"dev\":%d", r == CUDA_SUCCESS ? *device : -1);
}

FC_API CUresult cuCtxGetDevice(CUdevice *device) { return cuCtxGetDevice_v2(device, NULL); }

FC_API CUresult cuCtxGetFlags(unsigned int *flags)
{
    REQUIRE_INIT();
    CUcontext c;
    if (!flags) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CUresult r = fc_ctx_current_checked(&c);
    if (r == CUDA_SUCCESS) *flags = c->flags;
    API_RETURN(r, "");
}

FC_API CUresult cuCtxSetFlags(unsigned int flags)
{
    REQUIRE_INIT();
    CUcontext c;
    CUresult r = fc_ctx_current_checked(&c);
    if (r == CUDA_SUCCESS) c->flags = flags;
    API_RETURN(r, "\"flags\":%u", flags);
}

FC_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    REQUIRE_INIT();
    if (!ctxId) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!ctx) ctx = fc_current_ctx();
    if (!fc_valid_ctx(ctx)) API_RETURN(CUDA_ERROR_INVALID_CONTEXT, "");
    *ctxId = ctx->id;
    API_RETURN(CUDA_SUCCESS, "\"ctx\":%llu", ctx->id);
}

FC_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    REQUIRE_INIT();
    if (!version) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!ctx) ctx = fc_current_ctx();
    if (!fc_valid_ctx(ctx)) API_RETURN(CUDA_ERROR_INVALID_CONTEXT, "");
    *version = 3020; /* the context API version every context since CUDA 3.2 reports */
    API_RETURN(CUDA_SUCCESS, "");
}

FC_API CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    REQUIRE_INIT();
    CUcontext c;
    CUresult r = given_or_current(ctx, &c);
    if (r == CUDA_SUCCESS) fc_ctx_synchronize(c);
    API_RETURN(r, "");
}

FC_API CUresult cuCtxSynchronize(void) { return cuCtxSynchronize_v2(NULL); }

FC_API CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
    REQUIRE_INIT();
    CUcontext c;
    if (!value) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if ((unsigned)limit >= 16) API_RETURN(CUDA_ERROR_UNSUPPORTED_LIMIT, "\"limit\":%d", limit);
    CUresult r = fc_ctx_current_checked(&c);
    if (r == CUDA_SUCCESS) *value = c->limits[limit];
    API_RETURN(r, "\"limit\":%d", limit);
}

FC_API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    REQUIRE_INIT();
    CUcontext c;
    if ((unsigned)limit >= 16) API_RETURN(CUDA_ERROR_UNSUPPORTED_LIMIT, "\"limit\":%d", limit);
    CUresult r = fc_ctx_current_checked(&c);
    if (r == CUDA_SUCCESS) c->limits[limit] = value;
    API_RETURN(r, "\"limit\":%d,\"value\":%zu", limit, value);
}

FC_API CUresult cuCtxGetCacheConfig(CUfunc_cache *config)
{
    REQUIRE_INIT();
    if (!config) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    *config = CU_FUNC_CACHE_PREFER_NONE;
    API_RETURN(CUDA_SUCCESS, "");
}

FC_API CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    REQUIRE_INIT();
    API_RETURN(CUDA_SUCCESS, "\"config\":%d", config); /* a hint; nothing to cache here */
}

FC_API CUresult cuCtxGetSharedMemConfig(CUsharedconfig *config)
{
    REQUIRE_INIT();
    if (!config) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    *config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
    API_RETURN(CUDA_SUCCESS, "");
}

FC_API CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    REQUIRE_INIT();
    API_RETURN(CUDA_SUCCESS, "\"config\":%d", config);
}

FC_API CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    REQUIRE_INIT();
    if (leastPriority) *leastPriority = 0;
    if (greatestPriority) *greatestPriority = -5; /* Hopper's six priority levels */
    API_RETURN(CUDA_SUCCESS, "");
}

FC_API CUresult cuCtxResetPersistingL2Cache(void)
{
    REQUIRE_INIT();
    API_RETURN(CUDA_SUCCESS, "");
}

FC_API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    REQUIRE_INIT();
    CUcontext c;
    CUresult r = fc_ctx_current_checked(&c);
    if (r != CUDA_SUCCESS) API_RETURN(r, "");
    if (!fc_valid_ctx(peer) || flags) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (peer->device == c->device) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "");
    /* Every simulated GPU already addresses every other's memory. */
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d,\"peer\":%d", c->device, peer->device);
}

FC_API CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
    REQUIRE_INIT();
    if (!fc_valid_ctx(peer)) API_RETURN(CUDA_ERROR_INVALID_CONTEXT, "");
    API_RETURN(CUDA_SUCCESS, "\"peer\":%d", peer->device);
}

/* ---- context-local storage (runtime export table) ---- */

static CUcontext resolve(CUcontext c) { return c ? c : fc_current_ctx(); }

CUresult fc_ctx_local_put(CUcontext c, void *key, void *value, fc_ctx_local_dtor dtor)
{
    c = resolve(c);
    if (!c || c->magic != FC_CTX_MAGIC) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&c->lock);
    struct fc_ctx_local *l;
    for (l = c->locals; l && l->key != key; l = l->next) {}
    if (!l) {
        l = calloc(1, sizeof *l);
        if (!l) {
            pthread_mutex_unlock(&c->lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        l->key = key;
        l->next = c->locals;
        c->locals = l;
    }
    l->value = value;
    l->dtor = dtor;
    pthread_mutex_unlock(&c->lock);
    return CUDA_SUCCESS;
}

CUresult fc_ctx_local_remove(CUcontext c, void *key)
{
    c = resolve(c);
    if (!c || c->magic != FC_CTX_MAGIC) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&c->lock);
    for (struct fc_ctx_local **p = &c->locals; *p; p = &(*p)->next)
        if ((*p)->key == key) {
            struct fc_ctx_local *l = *p;
            *p = l->next;
            free(l);
            pthread_mutex_unlock(&c->lock);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&c->lock);
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult fc_ctx_local_get(void **value, CUcontext c, void *key)
{
    c = resolve(c);
    if (!c || c->magic != FC_CTX_MAGIC) return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&c->lock);
    struct fc_ctx_local *l;
    for (l = c->locals; l && l->key != key; l = l->next) {}
    if (l && value) *value = l->value;
    pthread_mutex_unlock(&c->lock);
    /* The runtime calls get before put: absent must be an error. */
    return l ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
