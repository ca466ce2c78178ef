/* The driver's hook for NCCL's kernel launches (device_link.h): decode the
 * launch now, refuse what the emulation cannot play, and queue the emulation
 * in the launch's stream. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algorithms.h"
#include "decode.h"
#include "device_link.h"
#include "emulation.h"
#include "log.h"
#include "release.h"
#include "trace.h"

#define KERNEL_PARAM_BYTES 4096u /* sizeof(ncclDevKernelArgs4K): what kernelParams[0] points at */

/* The identifier of a kernel name, mangled ("_Z29ncclDevKernel_...24ncclDev...")
 * or not. */
static void kernel_ident(const char *name, char *out, size_t n)
{
    const char *p = name;
    size_t len = strlen(name);
    if (p[0] == '_' && p[1] == 'Z') {
        char *end;
        unsigned long l = strtoul(p + 2, &end, 10);
        if (end != p + 2 && l <= strlen(end)) {
            p = end;
            len = l;
        }
    }
    size_t k = len < n - 1 ? len : n - 1; /* n > 0; a copy, not snprintf: once per launch */
    memcpy(out, p, k);
    out[k] = 0;
}

static atomic_bool reported_decode_error;

static void report(fc_nccl_launch *l)
{
    if (l->error[0] && !atomic_exchange(&reported_decode_error, true))
        fc_log_fatal_config("cannot decode NCCL %s kernel launch %s (first problem; others are traced): %s",
                            l->rel->version, l->kernel, l->error);
    if (fc_trace_enabled()) fc_nccl_trace_launch(l);
}

/* In stream order, where the kernel runs: read the communicator side, then
 * play the kernel. A communicator that does not read as the layout says is a
 * table error the emulation cannot get past: stop rather than hang. */
static void emulate_op(void *arg)
{
    fc_nccl_launch *l;
    memcpy(&l, arg, sizeof l);
    fc_nccl_resolve(l);
    report(l);
    if (!l->resolved || l->nconns_bad) {
        fc_log_fatal_config("NCCL %s kernel %s on rank %d cannot be emulated: %s", l->rel->version, l->kernel,
                            l->rank, l->error[0] ? l->error : "unusable connections");
        abort();
    }
    fc_emu_run(l);
    fc_nccl_launch_free(l);
}

static atomic_bool reported_unsupported;

CUresult fc_nccl_on_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, struct CUstream_st *s,
                           void **kernelParams, void **extra)
{
    (void)gy;
    (void)gz;
    const fc_nccl_release *rel = fc_nccl_release_current();
    if (!rel) return CUDA_ERROR_NOT_SUPPORTED; /* said once by fc_nccl_release_current */
    const void *args = NULL;
    size_t size = 0;
    if (extra) { /* what NCCL passes: CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE */
        for (int i = 0; i < 64 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) args = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1]) size = *(size_t *)extra[i + 1];
        }
    } else if (kernelParams && kernelParams[0]) { /* one parameter: ncclDevKernelArgs4K */
        args = kernelParams[0];
        size = KERNEL_PARAM_BYTES;
    }
    fc_nccl_launch *l = fc_nccl_decode_args(rel, args, size, gx);
    if (!l) return CUDA_ERROR_OUT_OF_MEMORY;
    kernel_ident(fc_function_name(f), l->kernel, sizeof l->kernel);
    l->stream = fc_stream_id(s);
    l->device = fc_stream_device(s);
    l->block = bx;
    char why[200];
    CUresult r = CUDA_SUCCESS;
    if (l->error[0]) {
        report(l);
        r = CUDA_ERROR_NOT_SUPPORTED;
    } else if (fc_algo_unsupported(l, why, sizeof why)) {
        if (!atomic_exchange(&reported_unsupported, true))
            fc_log_fatal_config("NCCL %s launched %s, which ncclsim's device emulation does not implement; the "
                                "launch fails (NCCL_ALGO / NCCL_PROTO can steer NCCL to Ring or Tree)",
                                rel->version, why);
        report(l); /* the trace */
        r = CUDA_ERROR_NOT_SUPPORTED;
    } else if (!fc_stream_enqueue(s, emulate_op, &l, sizeof l, false)) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        return CUDA_SUCCESS; /* emulate_op owns l */
    }
    fc_nccl_launch_free(l);
    return r;
}
