/* Legacy CUDA IPC. A handle carries what a peer needs to map the same memory:
 * the exporting process and its memfd descriptor (opened again through
 * /proc/<pid>/fd), the size, and the owning device. Opening a handle of the
 * same process returns the original pointer. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

#define IPC_MAGIC 0x4e435349u /* "NCSI" */

struct ipc_mem_handle {
    uint32_t magic;
    int32_t pid;
    int32_t fd;
    int32_t device;
    uint64_t base; /* in the exporter, to recognise same-process opens */
    uint64_t size;
};
_Static_assert(sizeof(struct ipc_mem_handle) <= CU_IPC_HANDLE_SIZE, "IPC handle too large");

FC_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    REQUIRE_INIT();
    fc_alloc a;
    if (!pHandle) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!fc_registry_find(dptr, &a) || a.kind != FC_MEM_DEVICE || a.fd < 0)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"ptr\":\"0x%llx\"", (unsigned long long)dptr);
    struct ipc_mem_handle h = {IPC_MAGIC, (int32_t)getpid(), a.fd, a.device, a.base, a.size};
    memset(pHandle, 0, sizeof *pHandle);
    memcpy(pHandle->reserved, &h, sizeof h);
    API_RETURN(CUDA_SUCCESS, "\"ptr\":\"0x%llx\",\"size\":%zu", (unsigned long long)a.base, a.size);
}

FC_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    REQUIRE_INIT();
    struct ipc_mem_handle h;
    memcpy(&h, handle.reserved, sizeof h);
    if (!pdptr || h.magic != IPC_MAGIC) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (h.pid == (int32_t)getpid()) {
        fc_alloc a;
        if (!fc_registry_find(h.base, &a) || a.base != h.base)
            API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"reason\":\"freed\"");
        *pdptr = h.base;
        API_RETURN(CUDA_SUCCESS, "\"pid\":%d,\"same_process\":1", h.pid);
    }
    int fd = fc_peer_fd_open(h.pid, h.fd, O_RDWR);
    if (fd < 0) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"pid\":%d,\"fd\":%d,\"errno\":%d", h.pid, h.fd, errno);
    void *p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        API_RETURN(CUDA_ERROR_MAP_FAILED, "\"errno\":%d", errno);
    }
    fc_alloc a = {.base = (uintptr_t)p, .size = h.size, .kind = FC_MEM_IPC_MAPPED, .device = h.device,
                  .fd = fd};
    fc_registry_add(&a);
    *pdptr = (CUdeviceptr)p;
    API_RETURN(CUDA_SUCCESS, "\"pid\":%d,\"size\":%llu,\"flags\":%u", h.pid, (unsigned long long)h.size, flags);
}

FC_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    return cuIpcOpenMemHandle_v2(pdptr, handle, flags);
}

FC_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    REQUIRE_INIT();
    fc_alloc a;
    if (!fc_registry_find(dptr, &a) || a.base != dptr)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"ptr\":\"0x%llx\"", (unsigned long long)dptr);
    if (a.kind == FC_MEM_DEVICE) API_RETURN(CUDA_SUCCESS, "\"same_process\":1");
    if (a.kind != FC_MEM_IPC_MAPPED) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    fc_registry_remove(a.base, NULL);
    munmap((void *)a.base, a.size);
    close(a.fd);
    API_RETURN(CUDA_SUCCESS, "\"ptr\":\"0x%llx\"", (unsigned long long)dptr);
}
