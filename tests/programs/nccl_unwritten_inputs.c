/* A collective whose inputs nobody wrote (a program's own kernels write
 * them on a GPU; the simulated GPU does not run those): its result is
 * what the memory holds, zeros, and reading it costs no memory. A second
 * collective's input is written by a copy queued just before it on the
 * same stream: that one is read as written. One process drives every GPU. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call_checks.h"

/* Shared memory this process has in memory (simulated memory is shared). */
static long rss_shmem_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "RssShmem:", 9) == 0) kib = strtol(line + 9, NULL, 10);
    if (f) fclose(f);
    return kib;
}

static int sync_all(int n, cudaStream_t *streams)
{
    for (int d = 0; d < n; d++) {
        CUDA(cudaSetDevice(d));
        CUDA(cudaStreamSynchronize(streams[d]));
    }
    return 0;
}

/* Every GPU's output: want(d, i) at element i, or the first difference. */
static int check(int n, float **out, size_t count, float *host, int written)
{
    for (int d = 0; d < n; d++) {
        CUDA(cudaSetDevice(d));
        CUDA(cudaMemcpy(host, out[d], count * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < count; i++) {
            float want = written ? (float)(n * (n + 1) / 2 + n * (int)(i % 5)) : 0.0f;
            if (host[i] != want) {
                fprintf(stderr, "%s inputs: GPU %d element %zu: %g, expected %g\n", written ? "written" : "unwritten",
                        d, i, host[i], want);
                return 1;
            }
        }
    }
    return 0;
}

int main(void)
{
    int n = 0;
    CUDA(cudaGetDeviceCount(&n));
    const size_t count = 1 << 20, bytes = count * sizeof(float); /* 4 MiB per GPU */
    ncclComm_t *comms = calloc((size_t)n, sizeof *comms);
    cudaStream_t *streams = calloc((size_t)n, sizeof *streams);
    float **written = calloc((size_t)n, sizeof *written), **unwritten = calloc((size_t)n, sizeof *unwritten);
    float **out = calloc((size_t)n, sizeof *out), **host = calloc((size_t)n, sizeof *host);
    NCCL(ncclCommInitAll(comms, n, NULL));
    for (int d = 0; d < n; d++) {
        CUDA(cudaSetDevice(d));
        CUDA(cudaMalloc((void **)&written[d], bytes));
        CUDA(cudaMalloc((void **)&unwritten[d], bytes));
        CUDA(cudaMalloc((void **)&out[d], bytes));
        CUDA(cudaStreamCreate(&streams[d]));
        host[d] = malloc(bytes); /* GPU d holds d + 1 + i % 5 at i */
        for (size_t i = 0; i < count; i++) host[d][i] = (float)(d + 1 + (int)(i % 5));
    }
    /* the copy and the collective queued together: the input is written by
     * the time the collective runs, not when it is launched */
    for (int d = 0; d < n; d++) {
        CUDA(cudaSetDevice(d));
        CUDA(cudaMemsetAsync(out[d], 0x7f, bytes, streams[d]));
        CUDA(cudaMemcpyAsync(written[d], host[d], bytes, cudaMemcpyHostToDevice, streams[d]));
    }
    NCCL(ncclGroupStart());
    for (int d = 0; d < n; d++)
        NCCL(ncclAllReduce(written[d], out[d], count, ncclFloat, ncclSum, comms[d], streams[d]));
    NCCL(ncclGroupEnd());
    if (sync_all(n, streams) || check(n, out, count, host[0], 1)) return 1;

    for (int d = 0; d < n; d++) {
        CUDA(cudaSetDevice(d));
        CUDA(cudaMemsetAsync(out[d], 0x7f, bytes, streams[d]));
    }
    if (sync_all(n, streams)) return 1;
    long before = rss_shmem_kib();
    NCCL(ncclGroupStart());
    for (int d = 0; d < n; d++)
        NCCL(ncclAllReduce(unwritten[d], out[d], count, ncclFloat, ncclSum, comms[d], streams[d]));
    NCCL(ncclGroupEnd());
    if (sync_all(n, streams)) return 1;
    long grew = rss_shmem_kib() - before;
    if (check(n, out, count, host[0], 0)) return 1;
    for (int d = 0; d < n; d++) {
        NCCL(ncclCommDestroy(comms[d]));
        CUDA(cudaFree(written[d]));
        CUDA(cudaFree(unwritten[d]));
        CUDA(cudaFree(out[d]));
        free(host[d]);
    }
    printf("allreduce of unwritten %zu KiB inputs over %d GPUs: zeros, shared memory grew %ld KiB\n", bytes >> 10, n,
           grew);
    return 0;
}
