/* The virtual memory management API (cuMem*): reservations are PROT_NONE
 * address space, physical allocations are memfds, mapping is mmap(MAP_FIXED).
 * POSIX file-descriptor export/import works across processes because the
 * descriptor is the memfd itself. The memfd's name records the owning
 * device, so an importer learns it from the descriptor alone. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm_handle.h"

#define GRANULARITY FC_VMM_GRANULARITY

/* ---- address reservations ---- */

/* Reserved ranges, so that cuMemMap only maps where the caller reserved. */
typedef struct reservation {
    uintptr_t base;
    size_t size;
    struct reservation *next;
} reservation;
static reservation *reservations;
static pthread_mutex_t reservations_lock = PTHREAD_MUTEX_INITIALIZER;

static bool reserved(uintptr_t ptr, size_t size)
{
    bool ok = false;
    pthread_mutex_lock(&reservations_lock);
    for (reservation *r = reservations; r && !ok; r = r->next)
        ok = ptr >= r->base && size <= r->size && ptr - r->base <= r->size - size;
    pthread_mutex_unlock(&reservations_lock);
    return ok;
}

FC_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags)
{
    REQUIRE_INIT();
    if (!ptr || !size || size % GRANULARITY || flags) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"size\":%zu", size);
    if (alignment < GRANULARITY) alignment = GRANULARITY;
    if (alignment & (alignment - 1)) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"alignment\":%zu", alignment);
    size_t span = size + alignment;
    char *p = mmap((void *)addr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) API_RETURN(CUDA_ERROR_OUT_OF_MEMORY, "\"size\":%zu", size);
    uintptr_t start = ((uintptr_t)p + alignment - 1) & ~(uintptr_t)(alignment - 1);
    if (start > (uintptr_t)p) munmap(p, start - (uintptr_t)p);
    uintptr_t end = (uintptr_t)p + span;
    if (end > start + size) munmap((void *)(start + size), end - (start + size));
    reservation *r = malloc(sizeof *r);
    if (!r) {
        munmap((void *)start, size);
        API_RETURN(CUDA_ERROR_OUT_OF_MEMORY, "\"size\":%zu", size);
    }
    *r = (reservation){start, size, NULL};
    pthread_mutex_lock(&reservations_lock);
    r->next = reservations;
    reservations = r;
    pthread_mutex_unlock(&reservations_lock);
    *ptr = start;
    API_RETURN(CUDA_SUCCESS, "\"size\":%zu,\"ptr\":\"0x%lx\"", size, (unsigned long)start);
}

FC_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    REQUIRE_INIT();
    if (!ptr || !size) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (fc_registry_overlaps(ptr, size)) /* still mapped */
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"ptr\":\"0x%llx\"", (unsigned long long)ptr);
    pthread_mutex_lock(&reservations_lock);
    reservation **pr = &reservations;
    while (*pr && !((*pr)->base == ptr && (*pr)->size == size)) pr = &(*pr)->next;
    reservation *found = *pr;
    if (found) *pr = found->next;
    pthread_mutex_unlock(&reservations_lock);
    if (!found) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"ptr\":\"0x%llx\",\"reason\":\"not a reservation\"",
                           (unsigned long long)ptr);
    free(found);
    munmap((void *)ptr, size);
    API_RETURN(CUDA_SUCCESS, "\"ptr\":\"0x%llx\",\"size\":%zu", (unsigned long long)ptr, size);
}

/* ---- physical allocations ---- */

static bool host_location(CUmemLocationType t)
{
    return t == CU_MEM_LOCATION_TYPE_HOST || t == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
           t == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

FC_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags)
{
    REQUIRE_INIT();
    if (!handle || !prop || !size || size % GRANULARITY || flags)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"size\":%zu", size);
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"type\":%d", prop->type);
    if (prop->requestedHandleTypes & ~(CUmemAllocationHandleType)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "\"handleTypes\":%d", prop->requestedHandleTypes);
    bool on_device = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
    if (on_device && !fc_valid_device(prop->location.id))
        API_RETURN(CUDA_ERROR_INVALID_DEVICE, "\"dev\":%d", prop->location.id);
    if (!on_device && !host_location(prop->location.type))
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"location\":%d", prop->location.type);
    if (on_device && !fc_mem_reserve(prop->location.id, size))
        API_RETURN(CUDA_ERROR_OUT_OF_MEMORY, "\"size\":%zu,\"dev\":%d", size, prop->location.id);

    char name[48];
    snprintf(name, sizeof name, "ncclsim-vmm-%s%d", on_device ? "d" : "h", on_device ? prop->location.id : 0);
    int fd = memfd_create(name, MFD_CLOEXEC);
    fc_vmm_handle *v = NULL;
    if (fd >= 0 && ftruncate(fd, (off_t)size) == 0) v = fc_vmm_handle_new(fd, size, prop, on_device);
    if (!v) {
        if (fd >= 0) close(fd);
        if (on_device) fc_mem_unreserve(prop->location.id, size);
        API_RETURN(CUDA_ERROR_OUT_OF_MEMORY, "\"size\":%zu", size);
    }
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)v;
    API_RETURN(CUDA_SUCCESS, "\"size\":%zu,\"location\":%d,\"id\":%d", size, prop->location.type,
               prop->location.id);
}

FC_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    REQUIRE_INIT();
    fc_vmm_handle *v = fc_vmm_handle_of(handle);
    if (!v) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    size_t size = v->size;
    fc_vmm_handle_unref(v); /* memory lives on while mapped */
    API_RETURN(CUDA_SUCCESS, "\"size\":%zu", size);
}

FC_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags)
{
    REQUIRE_INIT();
    fc_vmm_handle *v = fc_vmm_handle_of(handle);
    if (!v || !ptr || !size || flags || offset + size > v->size || ptr % GRANULARITY)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"ptr\":\"0x%llx\",\"size\":%zu", (unsigned long long)ptr, size);
    if (!reserved(ptr, size))
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"ptr\":\"0x%llx\",\"reason\":\"not reserved\"",
                   (unsigned long long)ptr);
    if (fc_registry_overlaps(ptr, size))
        API_RETURN(CUDA_ERROR_ALREADY_MAPPED, "\"ptr\":\"0x%llx\"", (unsigned long long)ptr);
    /* A multicast range stays without pages: only NCCL's kernels use it, and
     * their emulation reaches every device's bound memory behind it
     * (fc_multicast_copies); a stray access faults instead of reading one copy. */
    if (!v->mc) {
        void *p = mmap((void *)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, v->fd, (off_t)offset);
        if (p == MAP_FAILED) API_RETURN(CUDA_ERROR_MAP_FAILED, "\"errno\":%d", errno);
    }
    fc_vmm_handle_ref(v);
    bool host = v->prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE;
    fc_mem_kind kind = v->mc ? FC_MEM_MULTICAST : host ? FC_MEM_HOST_ALLOC : FC_MEM_VMM_MAPPED;
    fc_alloc a = {.base = ptr, .size = size, .kind = kind, .device = host ? 0 : v->prop.location.id,
                  .fd = v->mc ? -1 : v->fd, .handle = v, .offset = offset};
    fc_registry_add(&a);
    API_RETURN(CUDA_SUCCESS, "\"ptr\":\"0x%llx\",\"size\":%zu,\"offset\":%zu", (unsigned long long)ptr,
               size, offset);
}

FC_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    REQUIRE_INIT();
    if (!ptr || !size) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    size_t done = 0;
    fc_alloc a;
    while (done < size && fc_registry_find(ptr + done, &a) && a.handle && a.base == ptr + done) {
        fc_registry_remove(a.base, NULL);
        if (a.kind == FC_MEM_MULTICAST) fc_mc_unmapped(a.base, a.size);
        /* Back to reserved-but-unmapped address space. */
        mmap((void *)a.base, a.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        fc_vmm_handle_unref(a.handle);
        done += a.size;
    }
    API_RETURN(done == size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE,
               "\"ptr\":\"0x%llx\",\"size\":%zu", (unsigned long long)ptr, size);
}

FC_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    REQUIRE_INIT();
    if (!ptr || !size || (count && !desc)) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    for (size_t i = 0; i < count; i++)
        if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE && !fc_valid_device(desc[i].location.id))
            API_RETURN(CUDA_ERROR_INVALID_DEVICE, "\"dev\":%d", desc[i].location.id);
    fc_alloc a;
    if (!fc_registry_find(ptr, &a) || !a.handle)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"ptr\":\"0x%llx\"", (unsigned long long)ptr);
    /* Mapped memory is readable and writable from every simulated device already. */
    API_RETURN(CUDA_SUCCESS, "\"ptr\":\"0x%llx\",\"size\":%zu,\"count\":%zu", (unsigned long long)ptr, size, count);
}

FC_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    REQUIRE_INIT();
    if (!flags || !location) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    fc_alloc a;
    if (!fc_registry_find(ptr, &a) || !a.handle) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    API_RETURN(CUDA_SUCCESS, "");
}

FC_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option)
{
    REQUIRE_INIT();
    if (!granularity || !prop) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    *granularity = GRANULARITY;
    API_RETURN(CUDA_SUCCESS, "\"option\":%d,\"granularity\":%u", option, GRANULARITY);
}

FC_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                       CUmemGenericAllocationHandle handle)
{
    REQUIRE_INIT();
    fc_vmm_handle *v = fc_vmm_handle_of(handle);
    if (!prop || !v) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    *prop = v->prop;
    API_RETURN(CUDA_SUCCESS, "");
}

FC_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    REQUIRE_INIT();
    fc_alloc a;
    if (!handle || !fc_registry_find((uintptr_t)addr, &a) || !a.handle)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"addr\":\"%p\"", addr);
    fc_vmm_handle *v = a.handle;
    fc_vmm_handle_ref(v);
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)v;
    API_RETURN(CUDA_SUCCESS, "\"addr\":\"%p\"", addr);
}

/* ---- sharing ---- */

FC_API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                             CUmemAllocationHandleType handleType, unsigned long long flags)
{
    REQUIRE_INIT();
    fc_vmm_handle *v = fc_vmm_handle_of(handle);
    if (!shareableHandle || !v || flags) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "\"type\":%d", handleType);
    if (!(v->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"reason\":\"not created exportable\"");
    int fd = dup(v->fd);
    if (fd < 0) API_RETURN(CUDA_ERROR_OUT_OF_MEMORY, "\"errno\":%d", errno);
    *(int *)shareableHandle = fd;
    API_RETURN(CUDA_SUCCESS, "\"fd\":%d,\"size\":%zu", fd, v->size);
}

/* "ncclsim-vmm-d3" in /proc/self/fd/N's target names device 3. */
static bool owner_from_fd(int fd, CUmemAllocationProp *prop)
{
    char path[64], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0) return false;
    target[n] = 0;
    char kind;
    int id;
    const char *p = strstr(target, "ncclsim-vmm-");
    if (!p || sscanf(p, "ncclsim-vmm-%c%d", &kind, &id) != 2) return false;
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = kind == 'd' ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
    prop->location.id = id;
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return true;
}

FC_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                               CUmemAllocationHandleType shHandleType)
{
    REQUIRE_INIT();
    if (!handle) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "\"type\":%d", shHandleType);
    int fd = (int)(intptr_t)osHandle;
    fc_vmm_handle *mc = fd >= 0 ? fc_mc_import(fd) : NULL;
    if (mc) {
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)mc;
        API_RETURN(CUDA_SUCCESS, "\"fd\":%d,\"size\":%zu,\"multicast\":1", fd, mc->size);
    }
    struct stat st;
    CUmemAllocationProp prop = {0};
    if (fd < 0 || fstat(fd, &st) != 0 || !owner_from_fd(fd, &prop))
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"fd\":%d", fd);
    int mine = dup(fd); /* the caller closes its descriptor */
    fc_vmm_handle *v = mine >= 0 ? fc_vmm_handle_new(mine, (size_t)st.st_size, &prop, false) : NULL;
    if (!v) {
        if (mine >= 0) close(mine);
        API_RETURN(CUDA_ERROR_OUT_OF_MEMORY, "");
    }
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)v;
    API_RETURN(CUDA_SUCCESS, "\"fd\":%d,\"size\":%zu,\"dev\":%d", fd, v->size, prop.location.id);
}

/* dma-buf handle for a range: the memfd backing it serves the same purpose here. */
FC_API CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
                                              CUmemRangeHandleType handleType, unsigned long long flags)
{
    REQUIRE_INIT();
    if (!handle || handleType != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    fc_alloc a;
    if (!fc_registry_find(dptr, &a) || dptr + size > a.base + a.size)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"ptr\":\"0x%llx\"", (unsigned long long)dptr);
    int src = a.fd;
    int fd = src >= 0 ? dup(src) : -1;
    if (fd < 0) API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "\"ptr\":\"0x%llx\"", (unsigned long long)dptr);
    *(int *)handle = fd;
    API_RETURN(CUDA_SUCCESS, "\"ptr\":\"0x%llx\",\"size\":%zu,\"flags\":%llu", (unsigned long long)dptr,
               size, flags);
}
