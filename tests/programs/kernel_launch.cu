// A CUDA program with a real kernel: its fatbin is registered, the kernel is
// launched and the stream synchronises. Device code does not run on the
// simulated platform, so the check is that every runtime call succeeds.
#include <cstdio>

__global__ void scale(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

#define CUDA(call)                                                                       \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

int main()
{
    const int n = 1 << 20;
    float *x;
    cudaStream_t s;
    CUDA(cudaSetDevice(0));
    CUDA(cudaMalloc(&x, n * sizeof(float)));
    CUDA(cudaStreamCreate(&s));
    scale<<<(n + 255) / 256, 256, 0, s>>>(x, 2.0f, n);
    CUDA(cudaGetLastError());
    CUDA(cudaStreamSynchronize(s));
    cudaFuncAttributes attr;
    CUDA(cudaFuncGetAttributes(&attr, scale));
    CUDA(cudaFree(x));
    std::printf("kernel launched and synchronised: ok (maxThreadsPerBlock %d)\n", attr.maxThreadsPerBlock);
    return 0;
}
