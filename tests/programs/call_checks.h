/* Checks of the C test programs' CUDA and NCCL calls: on failure, the call
 * and its error on stderr, and main returns 1. */
#ifndef NCCLSIM_TEST_CALL_CHECKS_H
#define NCCLSIM_TEST_CALL_CHECKS_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>

/* `call` returns a status of `type` that is `ok` on success; `text` names
 * any other. */
#define CHECKED(type, call, ok, text)                                                    \
    do {                                                                                 \
        type s_ = (call);                                                                \
        if (s_ != (ok)) {                                                                \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, text(s_));      \
            return 1;                                                                    \
        }                                                                                \
    } while (0)
#define CUDA(call) CHECKED(cudaError_t, call, cudaSuccess, cudaGetErrorString)
#define NCCL(call) CHECKED(ncclResult_t, call, ncclSuccess, ncclGetErrorString)

#endif
