/* cuDeviceGetAttribute: the model's measured values first (gpu_models.json),
 * then the per-device facts of the platform (PCI address, NUMA node), then
 * the values every recent data-centre GPU reports. */
#include "internal.h"

#define A(name) CU_DEVICE_ATTRIBUTE_##name

/* Values not in the model data: features the simulated platform really
 * provides (VMM, POSIX-fd handles, pools, stream memory operations) say yes;
 * features it does not (fabric handles, MPS) say no. */
static const int common_defaults[FC_MAX_ATTRIBUTES] = {
    [A(MAXIMUM_TEXTURE1D_WIDTH)] = 131072,
    [A(MAXIMUM_TEXTURE2D_WIDTH)] = 131072,
    [A(MAXIMUM_TEXTURE2D_HEIGHT)] = 65536,
    [A(MAXIMUM_TEXTURE3D_WIDTH)] = 16384,
    [A(MAXIMUM_TEXTURE3D_HEIGHT)] = 16384,
    [A(MAXIMUM_TEXTURE3D_DEPTH)] = 16384,
    [A(MAXIMUM_TEXTURE2D_LAYERED_WIDTH)] = 32768,
    [A(MAXIMUM_TEXTURE2D_LAYERED_HEIGHT)] = 32768,
    [A(MAXIMUM_TEXTURE2D_LAYERED_LAYERS)] = 2048,
    [A(SURFACE_ALIGNMENT)] = 512,
    [A(MAXIMUM_TEXTURE1D_LAYERED_WIDTH)] = 32768,
    [A(MAXIMUM_TEXTURE1D_LAYERED_LAYERS)] = 2048,
    [A(CAN_TEX2D_GATHER)] = 1,
    [A(MAXIMUM_TEXTURE2D_GATHER_WIDTH)] = 32768,
    [A(MAXIMUM_TEXTURE2D_GATHER_HEIGHT)] = 32768,
    [A(MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE)] = 8192,
    [A(MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE)] = 8192,
    [A(MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE)] = 32768,
    [A(TEXTURE_PITCH_ALIGNMENT)] = 32,
    [A(MAXIMUM_TEXTURECUBEMAP_WIDTH)] = 32768,
    [A(MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH)] = 32768,
    [A(MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS)] = 2046,
    [A(MAXIMUM_SURFACE1D_WIDTH)] = 32768,
    [A(MAXIMUM_SURFACE2D_WIDTH)] = 131072,
    [A(MAXIMUM_SURFACE2D_HEIGHT)] = 65536,
    [A(MAXIMUM_SURFACE3D_WIDTH)] = 16384,
    [A(MAXIMUM_SURFACE3D_HEIGHT)] = 16384,
    [A(MAXIMUM_SURFACE3D_DEPTH)] = 16384,
    [A(MAXIMUM_SURFACE1D_LAYERED_WIDTH)] = 32768,
    [A(MAXIMUM_SURFACE1D_LAYERED_LAYERS)] = 2048,
    [A(MAXIMUM_SURFACE2D_LAYERED_WIDTH)] = 32768,
    [A(MAXIMUM_SURFACE2D_LAYERED_HEIGHT)] = 32768,
    [A(MAXIMUM_SURFACE2D_LAYERED_LAYERS)] = 2048,
    [A(MAXIMUM_SURFACECUBEMAP_WIDTH)] = 32768,
    [A(MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH)] = 32768,
    [A(MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS)] = 2046,
    [A(MAXIMUM_TEXTURE1D_LINEAR_WIDTH)] = 268435456,
    [A(MAXIMUM_TEXTURE2D_LINEAR_WIDTH)] = 131072,
    [A(MAXIMUM_TEXTURE2D_LINEAR_HEIGHT)] = 65000,
    [A(MAXIMUM_TEXTURE2D_LINEAR_PITCH)] = 2097120,
    [A(MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH)] = 32768,
    [A(MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT)] = 32768,
    [A(MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH)] = 32768,
    [A(SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO)] = 2,
    [A(PAGEABLE_MEMORY_ACCESS)] = 0,
    [A(CONCURRENT_MANAGED_ACCESS)] = 1,
    [A(CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM)] = 1,
    [A(CAN_USE_STREAM_MEM_OPS_V1)] = 1,
    [A(CAN_USE_64_BIT_STREAM_MEM_OPS_V1)] = 1,
    [A(CAN_USE_STREAM_WAIT_VALUE_NOR_V1)] = 1,
    [A(CAN_FLUSH_REMOTE_WRITES)] = 0,
    [A(HOST_REGISTER_SUPPORTED)] = 1,
    [A(PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES)] = 0,
    [A(DIRECT_MANAGED_MEM_ACCESS_FROM_HOST)] = 0,
    [A(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)] = 1,
    [A(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)] = 1,
    [A(GENERIC_COMPRESSION_SUPPORTED)] = 0,
    [A(MAX_PERSISTING_L2_CACHE_SIZE)] = 0, /* filled from L2 size below */
    [A(MAX_ACCESS_POLICY_WINDOW_SIZE)] = 134213632,
    [A(GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED)] = 1,
    [A(SPARSE_CUDA_ARRAY_SUPPORTED)] = 1,
    [A(READ_ONLY_HOST_REGISTER_SUPPORTED)] = 1,
    [A(TIMELINE_SEMAPHORE_INTEROP_SUPPORTED)] = 1,
    [A(MEMORY_POOLS_SUPPORTED)] = 1,
    [A(GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS)] = 1,
    [A(GPU_DIRECT_RDMA_WRITES_ORDERING)] = 0,
    [A(MEMPOOL_SUPPORTED_HANDLE_TYPES)] = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
    [A(DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED)] = 1,
    [A(CAN_USE_64_BIT_STREAM_MEM_OPS)] = 1,
    [A(CAN_USE_STREAM_WAIT_VALUE_NOR)] = 1,
    [A(DMA_BUF_SUPPORTED)] = 1,
    [A(IPC_EVENT_SUPPORTED)] = 1,
    [A(MEM_SYNC_DOMAIN_COUNT)] = 1,
    [A(TENSOR_MAP_ACCESS_SUPPORTED)] = 0,
    [A(HANDLE_TYPE_FABRIC_SUPPORTED)] = 0, /* keeps NCCL's multi-node NVLink off */
    [A(UNIFIED_FUNCTION_POINTERS)] = 1,
    [A(NUMA_CONFIG)] = 0,
    [A(NUMA_ID)] = -1,
    [A(MPS_ENABLED)] = 0,
    [A(D3D12_CIG_SUPPORTED)] = 0,
    [A(MEM_DECOMPRESS_ALGORITHM_MASK)] = 0,
    [A(MEM_DECOMPRESS_MAXIMUM_LENGTH)] = 0,
    [A(VULKAN_CIG_SUPPORTED)] = 0,
    [A(HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)] = 1,
    [A(HOST_NUMA_MEMORY_POOLS_SUPPORTED)] = 1,
    [A(HOST_NUMA_MULTINODE_IPC_SUPPORTED)] = 0,
};

int fc_device_attribute(CUdevice dev, int attr, bool *known)
{
    const fc_gpu *g = &fc_current_platform()->gpu[dev];
    const fc_gpu_model *m = g->model;
    *known = true;
    switch (attr) {
    /* per device, from the platform */
    case A(PCI_BUS_ID): return (int)g->pci.bus;
    case A(PCI_DEVICE_ID): return (int)g->pci.device;
    case A(PCI_DOMAIN_ID): return (int)g->pci.domain;
    case A(HOST_NUMA_ID): return g->numa_node;
    case A(MULTI_GPU_BOARD_GROUP_ID): return dev;
    case A(GPU_PCI_DEVICE_ID): return (int)((m->pci_device_id << 16) | 0x10de);
    case A(GPU_PCI_SUBSYSTEM_ID): return (int)((m->pci_subsystem_id << 16) | 0x10de);
    case A(COMPUTE_CAPABILITY_MAJOR): return m->sm / 10;
    case A(COMPUTE_CAPABILITY_MINOR): return m->sm % 10;
    /* Multicast objects need the GPU (sm90+) and NVSwitches that offer them. */
    case A(MULTICAST_SUPPORTED): return fc_current_platform()->multicast && m->has[attr] ? m->attr[attr] : 0;
    case A(MAX_PERSISTING_L2_CACHE_SIZE):
        if (!m->has[attr]) return m->attr[A(L2_CACHE_SIZE)] / 4 * 3;
        break;
    case A(MEM_SYNC_DOMAIN_COUNT): return m->sm >= 90 ? 4 : 1;
    case A(TENSOR_MAP_ACCESS_SUPPORTED): return m->sm >= 90;
    case A(CLUSTER_LAUNCH):
        if (!m->has[attr]) return m->sm >= 90;
        break;
    default: break;
    }
    if (attr <= 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX || attr >= FC_MAX_ATTRIBUTES) {
        *known = false;
        return 0;
    }
    return m->has[attr] ? m->attr[attr] : common_defaults[attr];
}

FC_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    REQUIRE_INIT();
    if (!pi) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"attr\":%d", attrib);
    if (!fc_valid_device(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "\"dev\":%d", dev);
    bool known;
    int v = fc_device_attribute(dev, (int)attrib, &known);
    if (!known) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"attr\":%d,\"dev\":%d", attrib, dev);
    *pi = v;
    API_RETURN(CUDA_SUCCESS, "\"attr\":%d,\"dev\":%d,\"value\":%d", attrib, dev, v);
}
