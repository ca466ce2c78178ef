/* An MPI + NCCL program in the style of nccl-tests: every process finds its
 * local rank from the hostnames of all processes (not from NCCL_HOSTID), uses
 * that GPU, and joins one communicator over all processes. */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
            MPI_Abort(MPI_COMM_WORLD, 1);                                    \
        }                                                                    \
    } while (0)

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    char host[256] = {0}, all[64][256];
    CHECK(size <= 64, "at most 64 processes");
    gethostname(host, sizeof host - 1);
    MPI_Allgather(host, 256, MPI_CHAR, all, 256, MPI_CHAR, MPI_COMM_WORLD);
    int local = 0;
    for (int r = 0; r < rank; r++) local += strcmp(all[r], host) == 0;

    CHECK(cudaSetDevice(local) == cudaSuccess, "rank %d: cudaSetDevice(%d) failed", rank, local);
    char bus[32];
    CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, local) == cudaSuccess, "rank %d: bus id", rank);

    ncclUniqueId id;
    if (rank == 0) CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, size, id, rank);
    CHECK(r == ncclSuccess, "rank %d: ncclCommInitRank: %s", rank, ncclGetErrorString(r));
    CHECK(ncclCommDestroy(comm) == ncclSuccess, "rank %d: ncclCommDestroy", rank);
    printf("rank %d host %s local rank %d device %d bus %s\n", rank, host, local, local, bus);
    MPI_Finalize();
    return 0;
}
