/* Checks of the C test programs' CUDA and NCCL calls: on failure, the call
 * and its error on stderr, and main returns 1. */
#ifndef NCCLSIM_TEST_CALL_CHECKS_H
#define NCCLSIM_TEST_CALL_CHECKS_H

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>

#define CUDA(call)                                                                       \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            return 1;                                                                    \
        }                                                                                \
    } while (0)
#define NCCL(call)                                                                       \
    do {                                                                                 \
        ncclResult_t r_ = (call);                                                        \
        if (r_ != ncclSuccess) {                                                         \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_)); \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

#endif
