/* cuPointerGetAttribute(s): answered from the memory registry. */
#include <string.h>

#include "internal.h"

static bool is_device_kind(fc_mem_kind k)
{
    return k == FC_MEM_DEVICE || k == FC_MEM_VMM_MAPPED || k == FC_MEM_IPC_MAPPED || k == FC_MEM_MANAGED;
}

/* CUDA_ERROR_INVALID_VALUE for memory the driver does not know, as the real one. */
static CUresult attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr, const fc_alloc *a)
{
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    if (!a) {
        if (attr == CU_POINTER_ATTRIBUTE_MEMORY_TYPE) *(unsigned *)data = 0;
        return CUDA_ERROR_INVALID_VALUE;
    }
    bool dev = is_device_kind(a->kind);
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: {
        CUcontext c = NULL;
        if (fc_primary_ctx_retain(a->device, &c) == CUDA_SUCCESS) cuDevicePrimaryCtxRelease_v2(a->device);
        *(CUcontext *)data = c;
        break;
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (dev && a->kind != FC_MEM_MANAGED) return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)(uintptr_t)ptr;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(int *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = a->buffer_id; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = a->kind == FC_MEM_MANAGED; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = a->device; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(int *)data = a->kind == FC_MEM_DEVICE; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = a->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a->size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = a->handle ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: *(int *)data = dev; break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *(unsigned long long *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(CUmemoryPool *)data = a->pool; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *(size_t *)data = a->size; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *(void **)data = (void *)a->base; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: *(unsigned long long *)data = a->buffer_id; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

FC_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute_, CUdeviceptr ptr)
{
    REQUIRE_INIT();
    fc_alloc a;
    bool found = fc_registry_find(ptr, &a);
    API_RETURN(attribute(data, attribute_, ptr, found ? &a : NULL), "\"attr\":%d,\"ptr\":\"0x%llx\"",
               attribute_, (unsigned long long)ptr);
}

/* The plural form succeeds for unknown memory and reports it as unregistered. */
FC_API CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                       void **data, CUdeviceptr ptr)
{
    REQUIRE_INIT();
    if (!attributes || !data) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    fc_alloc a;
    bool found = fc_registry_find(ptr, &a);
    for (unsigned i = 0; i < numAttributes; i++) {
        if (!data[i]) continue;
        if (attribute(data[i], attributes[i], ptr, found ? &a : NULL) != CUDA_SUCCESS) {
            switch (attributes[i]) { /* "not applicable" values */
            case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data[i] = NULL; break;
            case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = -2; break;
            case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data[i] = 0; break;
            case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
            case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data[i] = 0; break;
            case CU_POINTER_ATTRIBUTE_HOST_POINTER:
            case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *(void **)data[i] = NULL; break;
            case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
            case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *(size_t *)data[i] = 0; break;
            case CU_POINTER_ATTRIBUTE_BUFFER_ID:
            case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
            case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
            case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *(unsigned long long *)data[i] = 0; break;
            case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(CUmemoryPool *)data[i] = NULL; break;
            default: *(int *)data[i] = 0; break;
            }
        }
    }
    API_RETURN(CUDA_SUCCESS, "\"n\":%u,\"ptr\":\"0x%llx\",\"known\":%d", numAttributes,
               (unsigned long long)ptr, found);
}

FC_API CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute_, CUdeviceptr ptr)
{
    REQUIRE_INIT();
    if (!value || attribute_ != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!fc_registry_find(ptr, NULL)) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    /* Every simulated memory operation is already synchronous with respect to memory. */
    API_RETURN(CUDA_SUCCESS, "\"attr\":%d", attribute_);
}
