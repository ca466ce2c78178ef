/* A user program linked against NCCL and the shared CUDA runtime: one
 * process drives every GPU it sees, as single-node NCCL applications do. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#include "call_checks.h"

int main(void)
{
    int n = 0;
    CUDA(cudaGetDeviceCount(&n));
    ncclComm_t *comms = calloc((size_t)n, sizeof *comms);
    cudaStream_t *streams = calloc((size_t)n, sizeof *streams);
    float **bufs = calloc((size_t)n, sizeof *bufs);
    const size_t count = 1 << 18;
    NCCL(ncclCommInitAll(comms, n, NULL));
    float *host = malloc(count * sizeof(float));
    for (int d = 0; d < n; d++) { /* GPU d holds d + 1 + i % 5 at i */
        for (size_t i = 0; i < count; i++) host[i] = (float)(d + 1 + (int)(i % 5));
        CUDA(cudaSetDevice(d));
        CUDA(cudaMalloc((void **)&bufs[d], count * sizeof(float)));
        CUDA(cudaMemcpy(bufs[d], host, count * sizeof(float), cudaMemcpyHostToDevice));
        CUDA(cudaStreamCreate(&streams[d]));
    }
    NCCL(ncclGroupStart());
    for (int d = 0; d < n; d++)
        NCCL(ncclAllReduce(bufs[d], bufs[d], count, ncclFloat, ncclSum, comms[d], streams[d]));
    NCCL(ncclGroupEnd());
    for (int d = 0; d < n; d++) {
        CUDA(cudaSetDevice(d));
        CUDA(cudaStreamSynchronize(streams[d]));
    }
    for (int d = 0; d < n; d++) { /* in place: the sum over GPUs everywhere */
        CUDA(cudaSetDevice(d));
        CUDA(cudaMemcpy(host, bufs[d], count * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < count; i++) {
            float want = (float)(n * (n + 1) / 2 + n * (int)(i % 5));
            if (host[i] != want) {
                fprintf(stderr, "GPU %d element %zu: %g, expected %g\n", d, i, host[i], want);
                return 1;
            }
        }
    }
    for (int d = 0; d < n; d++) NCCL(ncclCommDestroy(comms[d]));
    int version;
    NCCL(ncclGetVersion(&version));
    printf("allreduce over %d GPUs with NCCL %d: ok\n", n, version);
    return 0;
}
