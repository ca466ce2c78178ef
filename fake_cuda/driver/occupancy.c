/* Occupancy: how many blocks, and thread-block clusters, of a kernel fit on
 * the GPU at once, from the per-SM limits of the GPU model (gpu_models.json)
 * and the function's attributes (modules.c). Libraries size their grids and
 * pick their kernels with these answers (cuBLAS probes clusters when its
 * handle is created), so they must be plausible and consistent with what a
 * launch accepts (launch.c). */
#include "internal.h"

#define A(name) CU_DEVICE_ATTRIBUTE_##name

static int attr(CUdevice dev, int a)
{
    bool known;
    return fc_device_attribute(dev, a, &known);
}

/* The device whose limits apply to a function: the current context's. Our
 * functions do not belong to a context (modules.c), so without a current
 * context device 0 answers, as before contexts were considered. */
static CUdevice current_device(void)
{
    CUcontext c = fc_current_ctx();
    return fc_valid_ctx(c) ? c->device : 0;
}

/* Blocks of `block` threads with `smem` dynamic shared memory that one SM
 * holds at once: the tightest of the SM's block, thread, shared-memory and
 * register limits (1 KiB of shared memory per block is the system's). */
static int blocks_per_sm(CUdevice dev, CUfunction f, int block, size_t smem)
{
    if (block <= 0 || block > fc_function_attr(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)) return 0;
    int n = attr(dev, A(MAX_BLOCKS_PER_MULTIPROCESSOR));
    int max_threads = attr(dev, A(MAX_THREADS_PER_MULTIPROCESSOR));
    if (max_threads / block < n) n = max_threads / block;
    size_t per_block = smem + (size_t)fc_function_attr(f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) + 1024;
    size_t smem_sm = (size_t)attr(dev, A(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
    if (smem_sm / per_block < (size_t)n) n = (int)(smem_sm / per_block);
    int regs = fc_function_attr(f, CU_FUNC_ATTRIBUTE_NUM_REGS) * block;
    int regs_sm = attr(dev, A(MAX_REGISTERS_PER_MULTIPROCESSOR));
    if (regs > 0 && regs_sm / regs < n) n = regs_sm / regs;
    return n;
}

/* ---- blocks ---- */

static CUresult occupancy(int *numBlocks, CUfunction f, int blockSize, size_t smem)
{
    if (!numBlocks || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!fc_valid_function(f)) return CUDA_ERROR_INVALID_HANDLE;
    *numBlocks = blocks_per_sm(current_device(), f, blockSize, smem);
    return CUDA_SUCCESS;
}

FC_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction f, int blockSize,
                                                            size_t dynamicSMemSize)
{
    REQUIRE_INIT();
    API_RETURN(occupancy(numBlocks, f, blockSize, dynamicSMemSize), "\"block\":%d", blockSize);
}

FC_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction f,
                                                                     int blockSize, size_t dynamicSMemSize,
                                                                     unsigned int flags)
{
    REQUIRE_INIT();
    API_RETURN(occupancy(numBlocks, f, blockSize, dynamicSMemSize), "\"block\":%d,\"flags\":%u",
               blockSize, flags);
}

FC_API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction f,
                                                        int numBlocks, int blockSize)
{
    REQUIRE_INIT();
    if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!fc_valid_function(f)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    CUdevice dev = current_device();
    int smem_sm = attr(dev, A(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
    int optin = attr(dev, A(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
    long per = smem_sm / numBlocks - 1024 - fc_function_attr(f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
    if (per > optin) per = optin;
    *dynamicSmemSize = per > 0 ? (size_t)per : 0;
    API_RETURN(CUDA_SUCCESS, "\"smem\":%zu", *dynamicSmemSize);
}

FC_API CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction f,
                                                 CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                 size_t dynamicSMemSize, int blockSizeLimit)
{
    REQUIRE_INIT();
    if (!minGridSize || !blockSize) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!fc_valid_function(f)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    CUdevice dev = current_device();
    int limit = fc_function_attr(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    if (blockSizeLimit > 0 && blockSizeLimit < limit) limit = blockSizeLimit;
    int best = 32, best_threads = 0;
    for (int b = 32; b <= limit; b += 32) {
        size_t smem = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(b) : dynamicSMemSize;
        int threads = blocks_per_sm(dev, f, b, smem) * b;
        if (threads > best_threads) {
            best_threads = threads;
            best = b;
        }
    }
    *blockSize = best;
    *minGridSize = attr(dev, A(MULTIPROCESSOR_COUNT)) * (best_threads / best);
    API_RETURN(CUDA_SUCCESS, "\"block\":%d", best);
}

FC_API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction f,
                                                          CUoccupancyB2DSize b2s, size_t smem,
                                                          int blockSizeLimit, unsigned int flags)
{
    (void)flags;
    return cuOccupancyMaxPotentialBlockSize(minGridSize, blockSize, f, b2s, smem, blockSizeLimit);
}

/* ---- thread-block clusters ----
 * A cluster's blocks run together on the SMs of one GPC. GPUs with clusters
 * (sm90 on) have 8 GPCs; their SMs come in pairs (TPCs), spread here as
 * evenly as the count allows (a real chip's split varies with floorsweeping:
 * H100 SXM's 132 SMs give two GPCs of 18 and six of 16). */
#define FC_GPCS 8

static int gpc_sms(CUdevice dev, int gpc)
{
    int tpcs = attr(dev, A(MULTIPROCESSOR_COUNT)) / 2;
    return 2 * (tpcs / FC_GPCS + (gpc < tpcs % FC_GPCS ? 1 : 0));
}

/* Largest cluster a launch of f accepts: 8 blocks (portable), 16 when the
 * function allows non-portable sizes. */
static int cluster_limit(CUfunction f)
{
    return fc_function_attr(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED) ? 16 : 8;
}

/* The cluster shape f requires (compiled in or set with cuFuncSetAttribute);
 * false when it requires none. */
static bool required_cluster(CUfunction f, unsigned dim[3])
{
    dim[0] = (unsigned)fc_function_attr(f, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH);
    dim[1] = (unsigned)fc_function_attr(f, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT);
    dim[2] = (unsigned)fc_function_attr(f, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH);
    return dim[0] && dim[1] && dim[2];
}

/* The cluster shape a launch configuration asks for; false when none. */
static bool config_cluster(const CUlaunchConfig *c, unsigned dim[3])
{
    for (unsigned i = 0; i < c->numAttrs; i++) {
        if (c->attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
        dim[0] = c->attrs[i].value.clusterDim.x;
        dim[1] = c->attrs[i].value.clusterDim.y;
        dim[2] = c->attrs[i].value.clusterDim.z;
        return true;
    }
    return false;
}

/* Blocks per cluster of a launch of f with configuration c (0: no cluster),
 * or INVALID_CLUSTER_SIZE when the shape is empty, too large, or not the
 * one the function requires. */
static CUresult launch_cluster_size(CUfunction f, const CUlaunchConfig *c, unsigned long long *size)
{
    unsigned want[3], req[3];
    bool asked = config_cluster(c, want), required = required_cluster(f, req);
    *size = 0;
    if (!asked && !required) return CUDA_SUCCESS;
    if (asked && required && (want[0] != req[0] || want[1] != req[1] || want[2] != req[2]))
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    const unsigned *d = asked ? want : req;
    *size = (unsigned long long)d[0] * d[1] * d[2];
    if (!*size || *size > (unsigned long long)cluster_limit(f)) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    return CUDA_SUCCESS;
}

/* The device of a configuration's stream, or of the current context for the
 * NULL and special streams. */
static CUresult config_device(const CUlaunchConfig *c, CUdevice *dev)
{
    CUstream h = c->hStream;
    if (h && h != CU_STREAM_LEGACY && h != CU_STREAM_PER_THREAD) {
        if (h->magic != FC_STREAM_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
        *dev = h->ctx->device;
        return CUDA_SUCCESS;
    }
    CUcontext ctx;
    CUresult r = fc_ctx_current_checked(&ctx);
    if (r == CUDA_SUCCESS) *dev = ctx->device;
    return r;
}

/* What both cluster queries check first; on success *dev is the device and
 * *bps how many of the configuration's blocks one SM holds. */
static CUresult cluster_query_setup(const void *out, CUfunction f, const CUlaunchConfig *c, CUdevice *dev,
                                    int *bps)
{
    if (!out || !c || (c->numAttrs && !c->attrs)) return CUDA_ERROR_INVALID_VALUE;
    if (!fc_valid_function(f)) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = config_device(c, dev);
    if (r != CUDA_SUCCESS) return r;
    if (!attr(*dev, A(CLUSTER_LAUNCH))) return CUDA_ERROR_NOT_SUPPORTED; /* before sm90 */
    unsigned long long block = (unsigned long long)c->blockDimX * c->blockDimY * c->blockDimZ;
    if (!block) return CUDA_ERROR_INVALID_VALUE;
    *bps = block > 1024 ? 0 : blocks_per_sm(*dev, f, (int)block, c->sharedMemBytes);
    return CUDA_SUCCESS;
}

static CUresult max_potential_cluster(int *out, CUfunction f, const CUlaunchConfig *c)
{
    CUdevice dev;
    int bps;
    CUresult r = cluster_query_setup(out, f, c, &dev, &bps);
    if (r != CUDA_SUCCESS) return r;
    unsigned req[3];
    if (required_cluster(f, req)) { /* the configuration's own shape is ignored */
        *out = (int)(req[0] * req[1] * req[2]);
        return CUDA_SUCCESS;
    }
    int fit = gpc_sms(dev, 0) * bps; /* GPC 0 is a largest */
    *out = fit < cluster_limit(f) ? fit : cluster_limit(f);
    return CUDA_SUCCESS;
}

static CUresult max_active_clusters(int *out, CUfunction f, const CUlaunchConfig *c)
{
    CUdevice dev;
    int bps;
    CUresult r = cluster_query_setup(out, f, c, &dev, &bps);
    if (r != CUDA_SUCCESS) return r;
    unsigned long long size;
    r = launch_cluster_size(f, c, &size);
    if (r != CUDA_SUCCESS) return r;
    if (!size) return CUDA_ERROR_INVALID_CLUSTER_SIZE; /* no shape given or required */
    int n = 0;
    for (int g = 0; g < FC_GPCS; g++) n += (int)((unsigned long long)gpc_sms(dev, g) * bps / size);
    *out = n;
    return CUDA_SUCCESS;
}

FC_API CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func, const CUlaunchConfig *config)
{
    REQUIRE_INIT();
    CUresult r = max_potential_cluster(clusterSize, func, config);
    API_RETURN(r, "\"cluster_size\":%d", r ? 0 : *clusterSize);
}

FC_API CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config)
{
    REQUIRE_INIT();
    CUresult r = max_active_clusters(numClusters, func, config);
    unsigned d[3] = {0, 0, 0};
    if (config && (!config->numAttrs || config->attrs)) config_cluster(config, d);
    API_RETURN(r, "\"cluster\":[%u,%u,%u],\"block\":[%u,%u,%u],\"smem\":%u,\"clusters\":%d", d[0], d[1],
               d[2], config ? config->blockDimX : 0, config ? config->blockDimY : 0,
               config ? config->blockDimZ : 0, config ? config->sharedMemBytes : 0, r ? 0 : *numClusters);
}

CUresult fc_launch_cluster_check(CUfunction f, const CUlaunchConfig *c)
{
    unsigned long long size;
    CUresult r = launch_cluster_size(f, c, &size);
    if (r != CUDA_SUCCESS || !size) return r;
    unsigned d[3];
    if (!config_cluster(c, d)) required_cluster(f, d);
    if (c->gridDimX % d[0] || c->gridDimY % d[1] || c->gridDimZ % d[2]) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    return CUDA_SUCCESS;
}
