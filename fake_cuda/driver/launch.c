/* Kernel launches. Device code does not run: a launch is checked like the
 * real driver checks it, recorded (trace), and completes in stream order;
 * NCCL's own kernels are the exception, emulated on the CPU (device/). */
#include <string.h>

#include "internal.h"
#include "timing.h"

/* A program's kernel computes nothing here: it takes the modelled time of
 * its launch only. */
static void run_kernel(void *arg)
{
    (void)arg;
    fc_time_op_end(fc_time_kernel_start());
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned smem, CUstream h, bool ptds, const char *how, void **params,
                       void **extra)
{
    if (!fc_valid_function(f)) return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz) return CUDA_ERROR_INVALID_VALUE;
    if ((unsigned long long)bx * by * bz > (unsigned)fc_function_attr(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK))
        return CUDA_ERROR_INVALID_VALUE;
    if (smem > (unsigned)fc_function_attr(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    CUresult r = fc_stream_resolve(h, ptds, &s);
    if (r != CUDA_SUCCESS) return r;
    fc_time_host_charge(fc_timing.host_launch_us - fc_timing.host_call_us); /* the enqueue charges the rest */
    fc_trace_event("launch", "\"how\":\"%s\",\"kernel\":\"%.300s\",\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"smem\":%u,\"stream\":%llu",
                   how, fc_function_name(f), gx, gy, gz, bx, by, bz, smem, s->id);
    /* NCCL's kernels are played on the CPU (device_link.h); their work is decoded
     * now, while the arguments are valid. Releases before 2.19 name them
     * ncclKernel_*: those cannot be played, and their launch must fail. */
    const char *name = fc_function_name(f);
    if (strstr(name, "ncclDevKernel_") || strstr(name, "ncclKernel_"))
        return fc_nccl_on_launch(f, gx, gy, gz, bx, s, params, extra);
    char none = 0;
    return fc_stream_enqueue(s, run_kernel, &none, 1, true) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

#define LAUNCH_KERNEL(sym, ptds, how)                                                              \
    FC_API CUresult sym(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,           \
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,      \
                        CUstream h, void **kernelParams, void **extra)                             \
    {                                                                                              \
        REQUIRE_INIT();                                                                            \
        API_RETURN(launch(f, gx, gy, gz, bx, by, bz, smem, h, ptds, how, kernelParams, extra),     \
                   "\"kernel\":\"%.200s\"", fc_function_name(f));                                  \
    }
LAUNCH_KERNEL(cuLaunchKernel, false, "kernel")
LAUNCH_KERNEL(cuLaunchKernel_ptsz, true, "kernel")

#define LAUNCH_COOP(sym, ptds)                                                                     \
    FC_API CUresult sym(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,           \
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,      \
                        CUstream h, void **kernelParams)                                           \
    {                                                                                              \
        REQUIRE_INIT();                                                                            \
        API_RETURN(launch(f, gx, gy, gz, bx, by, bz, smem, h, ptds, "cooperative", kernelParams,   \
                          NULL),                                                                   \
                   "\"kernel\":\"%.200s\"", fc_function_name(f));                                  \
    }
LAUNCH_COOP(cuLaunchCooperativeKernel, false)
LAUNCH_COOP(cuLaunchCooperativeKernel_ptsz, true)

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, bool ptds, void **params, void **extra)
{
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    if (c->numAttrs && !c->attrs) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < c->numAttrs; i++) {
        const CUlaunchAttribute *a = &c->attrs[i];
        if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            unsigned x = a->value.clusterDim.x, y = a->value.clusterDim.y, z = a->value.clusterDim.z;
            if (!x || !y || !z || c->gridDimX % x || c->gridDimY % y || c->gridDimZ % z)
                return CUDA_ERROR_INVALID_CLUSTER_SIZE;
        }
    }
    return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                  c->sharedMemBytes, c->hStream, ptds, "ex", params, extra);
}

FC_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    REQUIRE_INIT();
    API_RETURN(launch_ex(config, f, false, kernelParams, extra), "\"kernel\":\"%.200s\"", fc_function_name(f));
}

FC_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                      void **extra)
{
    REQUIRE_INIT();
    API_RETURN(launch_ex(config, f, true, kernelParams, extra), "\"kernel\":\"%.200s\"", fc_function_name(f));
}

/* ---- occupancy, from the device's per-SM limits ---- */

static int blocks_per_sm(CUfunction f, int block, size_t smem)
{
    bool k;
    int max_threads = fc_device_attribute(0, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, &k);
    int max_blocks = fc_device_attribute(0, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, &k);
    int smem_sm = fc_device_attribute(0, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, &k);
    int regs_sm = fc_device_attribute(0, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, &k);
    int n = max_blocks;
    if (block > 0 && max_threads / block < n) n = max_threads / block;
    size_t per_block = smem + (size_t)fc_function_attr(f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) + 1024;
    if ((int)((size_t)smem_sm / per_block) < n) n = (int)((size_t)smem_sm / per_block);
    int regs = fc_function_attr(f, CU_FUNC_ATTRIBUTE_NUM_REGS) * block;
    if (regs > 0 && regs_sm / regs < n) n = regs_sm / regs;
    return n;
}

static CUresult occupancy(int *numBlocks, CUfunction f, int blockSize, size_t smem)
{
    if (!numBlocks || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!fc_valid_function(f)) return CUDA_ERROR_INVALID_HANDLE;
    if (blockSize > fc_function_attr(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)) {
        *numBlocks = 0;
        return CUDA_SUCCESS;
    }
    *numBlocks = blocks_per_sm(f, blockSize, smem);
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
    bool k;
    int smem_sm = fc_device_attribute(0, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, &k);
    int optin = fc_device_attribute(0, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &k);
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
    bool k;
    int sms = fc_device_attribute(0, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &k);
    int limit = fc_function_attr(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    if (blockSizeLimit > 0 && blockSizeLimit < limit) limit = blockSizeLimit;
    int best = 32, best_threads = 0;
    for (int b = 32; b <= limit; b += 32) {
        size_t smem = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(b) : dynamicSMemSize;
        int threads = blocks_per_sm(f, b, smem) * b;
        if (threads > best_threads) {
            best_threads = threads;
            best = b;
        }
    }
    *blockSize = best;
    *minGridSize = sms * (best_threads / best);
    API_RETURN(CUDA_SUCCESS, "\"block\":%d", best);
}

FC_API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction f,
                                                          CUoccupancyB2DSize b2s, size_t smem,
                                                          int blockSizeLimit, unsigned int flags)
{
    (void)flags;
    return cuOccupancyMaxPotentialBlockSize(minGridSize, blockSize, f, b2s, smem, blockSizeLimit);
}
