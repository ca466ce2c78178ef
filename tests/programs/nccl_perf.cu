// nccl_perf: an NCCL collective benchmark in the style of nccl-tests'
// all_reduce_perf, written for ncclsim's tests and benchmarks. One MPI process
// per GPU; each finds its local rank (and so its GPU) from the hostnames of all
// processes, as nccl-tests does, so it runs unchanged on a real cluster and
// under `ncclsim launch`.
//
//   nccl_perf [-b MIN] [-e MAX] [-f FACTOR] [-o OP] [-n ITERS] [-w WARMUP]
//             [-c 0|1] [-r ROOT] [-i 0|1] [-x 0|1] [-R ROUNDS]
//
// Sizes are bytes with an optional K, M or G suffix (powers of 1024). OP is
// allreduce (default), allgather, reducescatter, broadcast, reduce, alltoall or
// sendrecv. The data are float32, reductions are sums. "size" in the table is
// the largest buffer of one rank (the sweep value rounded to what the operation
// can take), "count" the count passed to NCCL (per rank for allgather and
// reducescatter, per peer for alltoall). -i 1 runs in place (one buffer).
// -x 1 tests the check itself: the checked run leaves the NCCL operation
// out, so every received value must be counted wrong. -R N runs the sweep N
// times, each with a new communicator and new buffers (NCCL sets up its
// connections again, often where the last round's were).
//
// Checking (-c 1): after the timed iterations each size runs once more on
// fresh data into a receive buffer filled with NaN, and every rank copies its
// result back and compares it on the host with values computed on the host.
// The inputs are small integers whose sums over up to 1024 ranks stay below
// 2^24, so every partial sum is exact in float whatever order NCCL adds in.
//
// Device code: a startup probe tells whether this program's kernels execute
// (they do on a GPU; ncclsim's simulated GPUs record a program's launches but
// run none of its device code: only NCCL's kernels are emulated).
// The fill and check kernels are always launched, so the launch configuration
// is exercised everywhere. Where device code runs, the fill kernel writes the
// inputs and the check kernel's count must agree with the host's; elsewhere
// the inputs are written with cudaMemcpy. The host check is the one that
// decides, so a kernel that silently did not run cannot pass a wrong result.
//
// Exit status: 0 all results right (or not checked), 1 wrong results, 2 bad
// usage, 3 a CUDA, NCCL or MPI call failed (named on stderr).
//
// Build: nvcc -arch=sm_90 nccl_perf.cu -I<nccl>/include -L<nccl>/lib
//        -l:libnccl.so.2 plus the flags of `mpicc -show`.

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <unistd.h>

namespace {

int g_rank = -1;

[[noreturn]] void fail(const char *file, int line, const char *call, const char *what)
{
    std::fprintf(stderr, "nccl_perf: rank %d: %s:%d: %s failed: %s\n", g_rank, file, line, call, what);
    std::fflush(nullptr);
    // Exit rather than MPI_Abort: MPI launchers (mpiexec, srun) stop the
    // other ranks, which may be waiting for this one, when a rank exits
    // without finalising, and the rank's own status and last line show which
    // call failed, where MPI_Abort would kill its wrapper too. _Exit: no
    // atexit handler (NCCL's) runs, so a broken state cannot hang the exit.
    std::_Exit(3);
}

void fail_nccl(const char *file, int line, const char *call, ncclResult_t r)
{
    std::string what = ncclGetErrorString(r);
    const char *last = ncclGetLastError(nullptr);
    if (last && *last) what += std::string(" (") + last + ")";
    fail(file, line, call, what.c_str());
}

void fail_mpi(const char *file, int line, const char *call, int err)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, text, &len);
    fail(file, line, call, text);
}

#define CUDA_CHECK(call)                                                          \
    do {                                                                          \
        cudaError_t e_ = (call);                                                  \
        if (e_ != cudaSuccess) fail(__FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)
#define NCCL_CHECK(call)                                                          \
    do {                                                                          \
        ncclResult_t r_ = (call);                                                 \
        if (r_ != ncclSuccess) fail_nccl(__FILE__, __LINE__, #call, r_);          \
    } while (0)
#define MPI_CHECK(call)                                                           \
    do {                                                                          \
        int m_ = (call);                                                          \
        if (m_ != MPI_SUCCESS) fail_mpi(__FILE__, __LINE__, #call, m_);           \
    } while (0)

enum Op { ALLREDUCE, ALLGATHER, REDUCESCATTER, BROADCAST, REDUCE, ALLTOALL, SENDRECV, NUM_OPS };
const char *const kOpNames[NUM_OPS] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                       "reduce", "alltoall", "sendrecv"};

bool has_root(Op op) { return op == BROADCAST || op == REDUCE; }
bool reduces(Op op) { return op == ALLREDUCE || op == REDUCESCATTER || op == REDUCE; }
// Operations whose buffers hold one chunk per rank: sizes round to nranks elements.
bool chunked(Op op) { return op == ALLGATHER || op == REDUCESCATTER || op == ALLTOALL; }

// Bus bandwidth: the algorithm bandwidth scaled to what each rank's busiest
// link carries under an optimal algorithm, so that it compares with hardware
// peak whatever the rank count (the convention of nccl-tests' PERFORMANCE.md).
double bus_factor(Op op, int n)
{
    switch (op) {
    case ALLREDUCE: return 2.0 * (n - 1) / n;
    case ALLGATHER: case REDUCESCATTER: case ALLTOALL: return double(n - 1) / n;
    default: return 1.0;
    }
}

// ---- data: rank r's input at index i, and what each rank must receive ----

constexpr int kRankCycle = 64;       // the rank term repeats every 64 ranks ...
constexpr unsigned kIndexCycle = 251;  // ... but the index term shifts with the rank: no two
                                       // ranks below 64 x 251 send the same data

__host__ __device__ inline unsigned index_term(int r, size_t i) { return unsigned((i * 7 + unsigned(r) * 11) % kIndexCycle); }
__host__ __device__ inline unsigned rank_term(int r) { return 256u * unsigned(r % kRankCycle); }
__host__ __device__ inline float input(int r, size_t i) { return float(index_term(r, i) + rank_term(r)); }
constexpr unsigned kMaxInput = kIndexCycle - 1 + 256u * (kRankCycle - 1);

struct Expect {
    Op op;
    int rank, nranks, root;
    size_t count;
    unsigned sums[kIndexCycle];  // sum over ranks of input(r, i), by i % kIndexCycle

    void init_sums()
    {
        for (unsigned k = 0; k < kIndexCycle; k++) {
            sums[k] = 0;
            for (int r = 0; r < nranks; r++) sums[k] += index_term(r, k) + rank_term(r);
        }
    }

    // Integers below 2^24 (checked at startup): exact in float.
    __host__ __device__ float sum(size_t i) const { return float(sums[i % kIndexCycle]); }

    // What index i of this rank's receive buffer must hold.
    __host__ __device__ float at(size_t i) const
    {
        switch (op) {
        case ALLREDUCE: case REDUCE: return sum(i);
        case REDUCESCATTER: return sum(size_t(rank) * count + i);
        case ALLGATHER: return input(int(i / count), i % count);
        case ALLTOALL: return input(int(i / count), size_t(rank) * count + i % count);
        case BROADCAST: return input(root, i);
        case SENDRECV: return input((rank + nranks - 1) % nranks, i);
        default: return 0.0f;
        }
    }
};

__global__ void fill_kernel(float *p, size_t n, int rank)
{
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = input(rank, i);
}

__global__ void check_kernel(const float *p, size_t n, Expect x, unsigned long long *wrong)
{
    unsigned long long mine = 0;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        mine += p[i] != x.at(i);
    if (mine) atomicAdd(wrong, mine);
}

constexpr unsigned kMark = 0x600dc0deu;
__global__ void mark_kernel(unsigned *flag) { *flag = kMark; }

constexpr int kThreads = 256;
unsigned blocks_for(size_t n) { return unsigned(std::max<size_t>(1, std::min<size_t>((n + kThreads - 1) / kThreads, 1024))); }

// ---- options ----

struct Options {
    size_t min_bytes = 32 * 1024 * 1024, max_bytes = 32 * 1024 * 1024, factor = 2;
    Op op = ALLREDUCE;
    int iters = 5, warmup = 1, root = 0, rounds = 1;
    bool check = true, in_place = false, skip_checked_op = false;
};

bool parse_size(const char *text, size_t *out)
{
    errno = 0;
    char *end = nullptr;
    unsigned long long v = std::strtoull(text, &end, 10);
    if (errno || end == text || *text == '-') return false;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: return false;
    }
    if (*end != '\0' || (shift && v > (~0ull >> shift))) return false;
    *out = size_t(v << shift);
    return true;
}

bool parse_int(const char *text, int lo, int hi, int *out)
{
    errno = 0;
    char *end = nullptr;
    long v = std::strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < lo || v > hi) return false;
    *out = int(v);
    return true;
}

const char kUsage[] =
    "usage: nccl_perf [-b MIN] [-e MAX] [-f FACTOR] [-o OP] [-n ITERS] [-w WARMUP] [-c 0|1] [-r ROOT] [-i 0|1] [-x 0|1] [-R ROUNDS]\n"
    "  sizes in bytes, K/M/G suffixes; OP: allreduce allgather reducescatter broadcast reduce alltoall sendrecv\n";

// Returns an empty string when the options are good, else what is wrong.
std::string parse_options(int argc, char **argv, int nranks, Options *o)
{
    int opt, v;
    opterr = 0;  // one message, from rank 0, instead of one per rank
    while ((opt = getopt(argc, argv, "b:e:f:o:n:w:c:r:i:x:R:h")) != -1) {
        switch (opt) {
        case 'b': if (!parse_size(optarg, &o->min_bytes)) return std::string("bad size -b ") + optarg; break;
        case 'e': if (!parse_size(optarg, &o->max_bytes)) return std::string("bad size -e ") + optarg; break;
        case 'f':
            if (!parse_int(optarg, 2, 1 << 20, &v)) return std::string("-f must be an integer >= 2: ") + optarg;
            o->factor = size_t(v);
            break;
        case 'o': {
            int k = 0;
            while (k < NUM_OPS && std::strcmp(optarg, kOpNames[k]) != 0) k++;
            if (k == NUM_OPS) return std::string("unknown operation -o ") + optarg;
            o->op = Op(k);
            break;
        }
        case 'n': if (!parse_int(optarg, 1, 1 << 30, &o->iters)) return std::string("-n must be >= 1: ") + optarg; break;
        case 'w': if (!parse_int(optarg, 0, 1 << 30, &o->warmup)) return std::string("-w must be >= 0: ") + optarg; break;
        case 'R': if (!parse_int(optarg, 1, 1000, &o->rounds)) return std::string("-R must be 1..1000: ") + optarg; break;
        case 'c': if (!parse_int(optarg, 0, 1, &v)) return std::string("-c must be 0 or 1: ") + optarg; o->check = v; break;
        case 'i': if (!parse_int(optarg, 0, 1, &v)) return std::string("-i must be 0 or 1: ") + optarg; o->in_place = v; break;
        case 'x': if (!parse_int(optarg, 0, 1, &v)) return std::string("-x must be 0 or 1: ") + optarg; o->skip_checked_op = v; break;
        case 'r':
            if (!parse_int(optarg, 0, nranks - 1, &o->root)) return std::string("-r must be a rank: ") + optarg;
            break;
        case 'h': return "help";
        default: return std::string("unknown or incomplete option -") + char(optopt);
        }
    }
    if (optind < argc) return std::string("unexpected argument ") + argv[optind];
    if (o->min_bytes == 0 || o->min_bytes > o->max_bytes) return "sizes must satisfy 0 < MIN <= MAX";
    if (o->in_place && (o->op == ALLTOALL || o->op == SENDRECV))
        return std::string("-i 1: ") + kOpNames[o->op] + " has no in-place form";
    // Every partial sum must stay an exact float (below 2^24).
    if (static_cast<unsigned long long>(kMaxInput) * unsigned(nranks) >= (1ull << 24))
        return "too many ranks (at most 1024) for exact float sums";
    return "";
}

// ---- buffers of one size ----

struct Layout {
    size_t bytes;        // the table's size: the largest buffer of one rank
    size_t count;        // what NCCL is passed
    size_t send, recv;   // elements in each buffer
    size_t send_off, recv_off;  // in place: element offsets into the one buffer
};

Layout layout_for(Op op, size_t bytes, int rank, int n, bool in_place)
{
    size_t unit = chunked(op) ? size_t(n) : 1;
    size_t elems = bytes / sizeof(float) / unit * unit;
    if (elems == 0) elems = unit;  // at least one element per rank
    Layout l{elems * sizeof(float), elems, elems, elems, 0, 0};
    if (chunked(op)) l.count = elems / n;
    if (op == ALLGATHER) l.send = l.count;
    if (op == REDUCESCATTER) l.recv = l.count;
    if (in_place && op == ALLGATHER) l.send_off = size_t(rank) * l.count;
    if (in_place && op == REDUCESCATTER) l.recv_off = size_t(rank) * l.count;
    return l;
}

struct Bench {
    Options opt;
    int rank = 0, nranks = 1;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    float *sendbuf = nullptr, *recvbuf = nullptr;  // the same buffer in place
    unsigned long long *dev_wrong = nullptr;
    std::vector<float> staging;  // host side of fills and checks, a chunk at a time
    bool device_runs = false;

    void sync()
    {
        CUDA_CHECK(cudaStreamSynchronize(stream));
        ncclResult_t async = ncclSuccess;
        NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
        if (async != ncclSuccess) fail_nccl(__FILE__, __LINE__, "NCCL operation (asynchronous error)", async);
    }

    void run(const Layout &l)
    {
        float *s = sendbuf + l.send_off, *r = recvbuf + l.recv_off;
        int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
        switch (opt.op) {
        case ALLREDUCE: NCCL_CHECK(ncclAllReduce(s, r, l.count, ncclFloat, ncclSum, comm, stream)); break;
        case ALLGATHER: NCCL_CHECK(ncclAllGather(s, r, l.count, ncclFloat, comm, stream)); break;
        case REDUCESCATTER: NCCL_CHECK(ncclReduceScatter(s, r, l.count, ncclFloat, ncclSum, comm, stream)); break;
        case BROADCAST: NCCL_CHECK(ncclBroadcast(s, r, l.count, ncclFloat, opt.root, comm, stream)); break;
        case REDUCE: NCCL_CHECK(ncclReduce(s, r, l.count, ncclFloat, ncclSum, opt.root, comm, stream)); break;
        case ALLTOALL:
            // Grouped point-to-point: every NCCL release has it (ncclAlltoAll is 2.28+).
            NCCL_CHECK(ncclGroupStart());
            for (int p = 0; p < nranks; p++) {
                NCCL_CHECK(ncclSend(s + size_t(p) * l.count, l.count, ncclFloat, p, comm, stream));
                NCCL_CHECK(ncclRecv(r + size_t(p) * l.count, l.count, ncclFloat, p, comm, stream));
            }
            NCCL_CHECK(ncclGroupEnd());
            break;
        case SENDRECV:
            NCCL_CHECK(ncclGroupStart());
            NCCL_CHECK(ncclSend(s, l.count, ncclFloat, next, comm, stream));
            NCCL_CHECK(ncclRecv(r, l.count, ncclFloat, prev, comm, stream));
            NCCL_CHECK(ncclGroupEnd());
            break;
        default: break;
        }
    }

    // This rank's inputs into its send buffer.
    void fill(const Layout &l)
    {
        float *s = sendbuf + l.send_off;
        fill_kernel<<<blocks_for(l.send), kThreads, 0, stream>>>(s, l.send, rank);
        CUDA_CHECK(cudaGetLastError());
        if (!device_runs) {
            for (size_t at = 0; at < l.send; at += staging.size()) {
                size_t n = std::min(staging.size(), l.send - at);
                for (size_t i = 0; i < n; i++) staging[i] = input(rank, at + i);
                CUDA_CHECK(cudaMemcpyAsync(s + at, staging.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
                CUDA_CHECK(cudaStreamSynchronize(stream));  // before the staging buffer is reused
            }
        }
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }

    // Wrong values in this rank's receive buffer, counted on the host (and,
    // where device code runs, by the check kernel too: the counts must agree).
    unsigned long long check(const Layout &l, size_t size_bytes)
    {
        if (opt.op == REDUCE && rank != opt.root) return 0;  // only the root receives
        const float *r = recvbuf + l.recv_off;
        Expect x{opt.op, rank, nranks, opt.root, l.count, {}};
        x.init_sums();
        CUDA_CHECK(cudaMemsetAsync(dev_wrong, 0, sizeof *dev_wrong, stream));
        check_kernel<<<blocks_for(l.recv), kThreads, 0, stream>>>(r, l.recv, x, dev_wrong);
        CUDA_CHECK(cudaGetLastError());
        unsigned long long wrong = 0, first = 0;
        float got_first = 0, want_first = 0;
        for (size_t at = 0; at < l.recv; at += staging.size()) {
            size_t n = std::min(staging.size(), l.recv - at);
            CUDA_CHECK(cudaMemcpyAsync(staging.data(), r + at, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
            CUDA_CHECK(cudaStreamSynchronize(stream));
            for (size_t i = 0; i < n; i++) {
                float want = x.at(at + i);
                if (staging[i] != want) {
                    if (!wrong++) first = at + i, got_first = staging[i], want_first = want;
                }
            }
        }
        if (wrong)
            std::fprintf(stderr, "nccl_perf: rank %d: %s %zu B: %llu of %zu values wrong; first at index %llu: %g, expected %g\n",
                         rank, kOpNames[opt.op], size_bytes, wrong, l.recv, first, double(got_first), double(want_first));
        if (device_runs) {
            unsigned long long on_device = 0;
            CUDA_CHECK(cudaMemcpyAsync(&on_device, dev_wrong, sizeof on_device, cudaMemcpyDeviceToHost, stream));
            CUDA_CHECK(cudaStreamSynchronize(stream));
            if (on_device != wrong) {
                char what[160];
                std::snprintf(what, sizeof what, "the GPU counted %llu wrong values, the host %llu", on_device, wrong);
                fail(__FILE__, __LINE__, "check_kernel", what);
            }
        }
        return wrong;
    }
};

// Does device code execute here? A kernel writes a mark; on a simulated GPU
// the launch succeeds but the mark never arrives.
bool probe_device_code(cudaStream_t stream)
{
    unsigned *flag = nullptr, got = 0;
    CUDA_CHECK(cudaMalloc(&flag, sizeof *flag));
    CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof *flag, stream));
    mark_kernel<<<1, 1, 0, stream>>>(flag);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpyAsync(&got, flag, sizeof got, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaFree(flag));
    return got == kMark;
}

std::string human_bytes(size_t b)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (u < 3 && b >= 1024 && b % 1024 == 0) b /= 1024, u++;
    return std::to_string(b) + " " + units[u];
}

}  // namespace

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // failures are named by MPI_CHECK
    Bench b;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &b.rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &b.nranks));
    g_rank = b.rank;
    const int rank = b.rank, nranks = b.nranks;

    std::string bad = parse_options(argc, argv, nranks, &b.opt);
    if (!bad.empty()) {
        if (rank == 0) std::fputs(kUsage, bad == "help" ? stdout : stderr);
        // Every rank, last: whichever rank's exit a launcher sees first, its
        // last line says what is wrong.
        if (bad != "help") std::fprintf(stderr, "nccl_perf: %s\n", bad.c_str());
        MPI_Finalize();
        return bad == "help" ? 0 : 2;
    }
    const Options &opt = b.opt;

    // Local rank: how many lower ranks share this process's hostname.
    constexpr int kHost = 256;
    char host[kHost] = {0};
    if (gethostname(host, kHost - 1) != 0) fail(__FILE__, __LINE__, "gethostname", std::strerror(errno));
    std::vector<char> hosts(size_t(nranks) * kHost);
    MPI_CHECK(MPI_Allgather(host, kHost, MPI_CHAR, hosts.data(), kHost, MPI_CHAR, MPI_COMM_WORLD));
    int local = 0, nhosts = 0;
    for (int r = 0; r < nranks; r++) {
        const char *h = &hosts[size_t(r) * kHost];
        if (r < rank && std::strcmp(h, host) == 0) local++;
        bool seen = false;
        for (int q = 0; q < r && !seen; q++) seen = std::strcmp(&hosts[size_t(q) * kHost], h) == 0;
        nhosts += !seen;
    }

    int ndev = 0;
    CUDA_CHECK(cudaGetDeviceCount(&ndev));
    if (local >= ndev) {
        char what[kHost + 64];
        std::snprintf(what, sizeof what, "local rank %d on %s but only %d GPU(s)", local, host, ndev);
        fail(__FILE__, __LINE__, "choosing a GPU", what);
    }
    CUDA_CHECK(cudaSetDevice(local));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, local));
    char bus[32];
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, local));
    CUDA_CHECK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
    b.device_runs = probe_device_code(b.stream);

    unsigned long long wrong_total = 0;
    double busbw_sum = 0;
    int rows = 0;
    for (int round = 0; round < opt.rounds; round++) {
        ncclUniqueId id;
        if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
        MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
        NCCL_CHECK(ncclCommInitRank(&b.comm, nranks, id, rank));

        // Buffers for the largest size, reused by every smaller one.
        Layout top = layout_for(opt.op, opt.max_bytes, rank, nranks, opt.in_place);
        if (opt.in_place) {
            CUDA_CHECK(cudaMalloc(&b.sendbuf, std::max(top.send, top.recv) * sizeof(float)));
            b.recvbuf = b.sendbuf;
        } else {
            CUDA_CHECK(cudaMalloc(&b.sendbuf, top.send * sizeof(float)));
            CUDA_CHECK(cudaMalloc(&b.recvbuf, top.recv * sizeof(float)));
        }
        CUDA_CHECK(cudaMalloc(&b.dev_wrong, sizeof *b.dev_wrong));
        b.staging.resize(std::min<size_t>(std::max(top.send, top.recv), 1 << 20));
        b.fill(top);  // the timed runs move real data even without -c

        // Header, with every rank's host and GPU.
        char mine[kHost + sizeof prop.name + 96];  // room for every field: nothing is cut
        std::snprintf(mine, sizeof mine, "#  rank %3d host %s device %d [%s] %s", rank, host, local, bus, prop.name);
        std::vector<char> lines(rank == 0 ? sizeof mine * size_t(nranks) : 1);
        MPI_CHECK(MPI_Gather(mine, sizeof mine, MPI_CHAR, lines.data(), sizeof mine, MPI_CHAR, 0, MPI_COMM_WORLD));
        int runs_here = b.device_runs, runs_total = 0;
        MPI_CHECK(MPI_Reduce(&runs_here, &runs_total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
        if (rank == 0 && round > 0) std::printf("# round %d of %d: a new communicator and new buffers\n", round + 1, opt.rounds);
        if (rank == 0 && round == 0) {
            int version = 0, driver = 0, runtime = 0;
            NCCL_CHECK(ncclGetVersion(&version));
            CUDA_CHECK(cudaDriverGetVersion(&driver));
            CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
            std::printf("# nccl_perf: %s, float %s, %s; %d ranks on %d host(s); NCCL %d.%d.%d, CUDA driver %d, runtime %d\n",
                        kOpNames[opt.op], reduces(opt.op) ? "sum" : "(no reduction)",
                        opt.in_place ? "in place" : "out of place", nranks, nhosts, version / 10000,
                        version / 100 % 100, version % 100, driver, runtime);
            std::printf("# sizes %s to %s, factor %zu; %d iteration(s) after %d warmup; check %s\n",
                        human_bytes(opt.min_bytes).c_str(), human_bytes(opt.max_bytes).c_str(), opt.factor, opt.iters,
                        opt.warmup, !opt.check ? "off" : opt.skip_checked_op ? "on, without the operation (-x 1)" : "on (on the host)");
            std::printf("# device code ran on %d of %d rank(s)%s\n", runs_total, nranks,
                        runs_total == nranks ? "" : ": inputs written with cudaMemcpy where it did not (simulated GPUs)");
            for (int r = 0; r < nranks; r++) std::printf("%s\n", &lines[sizeof mine * size_t(r)]);
            std::printf("#\n# %10s %12s %6s %6s %5s %10s %12s %12s %8s\n", "size", "count", "type", "redop", "root",
                        "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
            std::printf("# %10s %12s\n", "(B)", "(elements)");
            std::fflush(stdout);
        }

        std::vector<Layout> sizes;
        for (size_t size = opt.min_bytes;; size *= opt.factor) {
            Layout l = layout_for(opt.op, size, rank, nranks, opt.in_place);
            if (sizes.empty() || l.bytes != sizes.back().bytes) sizes.push_back(l);  // else rounded to the previous
            if (size > opt.max_bytes / opt.factor) break;  // the next would pass MAX (or overflow)
        }
        for (const Layout &l : sizes) {

            for (int i = 0; i < opt.warmup; i++) b.run(l);
            b.sync();
            MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));  // start together: the slowest rank sets the time
            double t0 = MPI_Wtime();
            for (int i = 0; i < opt.iters; i++) b.run(l);
            b.sync();
            double seconds = (MPI_Wtime() - t0) / opt.iters;

            unsigned long long wrong = 0;
            if (opt.check) {
                // Fresh inputs and a NaN-filled result (NaN equals nothing): the
                // timed runs may have changed in-place inputs, and an operation
                // that writes nothing must not pass on an earlier size's result.
                if (!opt.in_place || opt.op == ALLGATHER)  // in place, the inputs fill the rest
                    CUDA_CHECK(cudaMemsetAsync(b.recvbuf, 0xff, (l.recv_off + l.recv) * sizeof(float), b.stream));
                b.fill(l);
                if (!opt.skip_checked_op) b.run(l);
                b.sync();
                wrong = b.check(l, l.bytes);
            }

            double slowest = 0;
            unsigned long long wrong_all = 0;
            MPI_CHECK(MPI_Reduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Reduce(&wrong, &wrong_all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
            if (rank == 0) {
                double algbw = slowest > 0 ? l.bytes / slowest / 1e9 : 0, busbw = algbw * bus_factor(opt.op, nranks);
                busbw_sum += busbw;
                rows++;
                wrong_total += wrong_all;
                std::string w = opt.check ? std::to_string(wrong_all) : "N/A";
                std::printf("  %10zu %12zu %6s %6s %5d %10.2f %12.3f %12.3f %8s\n", l.bytes, l.count, "float",
                            reduces(opt.op) ? "sum" : "none", has_root(opt.op) ? opt.root : -1, slowest * 1e6, algbw,
                            busbw, w.c_str());
                std::fflush(stdout);
            }
        }
        NCCL_CHECK(ncclCommDestroy(b.comm));
        CUDA_CHECK(cudaFree(b.dev_wrong));
        CUDA_CHECK(cudaFree(b.sendbuf));
        if (b.recvbuf != b.sendbuf) CUDA_CHECK(cudaFree(b.recvbuf));
    }
    MPI_CHECK(MPI_Bcast(&wrong_total, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD));

    if (rank == 0) {
        if (opt.check)
            std::printf("# Out of bounds values : %llu %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
        else
            std::printf("# Out of bounds values : N/A (not checked)\n");
        std::printf("# Avg bus bandwidth    : %.3f\n#\n", rows ? busbw_sum / rows : 0.0);
        std::fflush(stdout);
        if (wrong_total)
            std::fprintf(stderr, "nccl_perf: %llu wrong values over all ranks and sizes: the results are not correct\n",
                         wrong_total);
    }

    CUDA_CHECK(cudaStreamDestroy(b.stream));
    MPI_CHECK(MPI_Finalize());
    return wrong_total ? 1 : 0;
}
