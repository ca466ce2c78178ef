/* Kernel launches. Device code does not run: a launch is checked like the
 * real driver checks it, recorded (trace), and completes in stream order;
 * NCCL's own kernels are the exception, emulated on the CPU (device/). */
#include <string.h>

#include "../common/host_lib.h"
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
    if (strstr(name, "ncclDevKernel_") || strstr(name, "ncclKernel_")) {
        if (ncclsim_shared_pages_settle) ncclsim_shared_pages_settle(); /* NCCL's init is over */
        return fc_nccl_on_launch(f, gx, gy, gz, bx, s, params, extra);
    }
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
    if (!fc_valid_function(f)) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = fc_launch_cluster_check(f, c);
    if (r != CUDA_SUCCESS) return r;
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
