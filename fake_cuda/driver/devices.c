/* Device enumeration and identity: what the runtime and NCCL ask about each GPU. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

#define CHECK_DEV(dev)                                                                 \
    do {                                                                               \
        if (!fc_valid_device(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "\"dev\":%d", (int)(dev)); \
    } while (0)

FC_API CUresult cuDeviceGetCount(int *count)
{
    REQUIRE_INIT();
    if (!count) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    *count = fc_device_count();
    API_RETURN(CUDA_SUCCESS, "\"count\":%d", *count);
}

FC_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    REQUIRE_INIT();
    if (!device) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CHECK_DEV(ordinal);
    *device = ordinal;
    API_RETURN(CUDA_SUCCESS, "\"ordinal\":%d", ordinal);
}

FC_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    REQUIRE_INIT();
    if (!name || len <= 0) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CHECK_DEV(dev);
    snprintf(name, (size_t)len, "%s", fc_current_platform()->gpu[dev].model->name);
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d,\"name\":\"%s\"", dev, name);
}

FC_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    REQUIRE_INIT();
    if (!bytes) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CHECK_DEV(dev);
    *bytes = fc_current_platform()->gpu[dev].memory;
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d,\"bytes\":%zu", dev, *bytes);
}

FC_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t b = 0;
    CUresult r = cuDeviceTotalMem_v2(&b, dev);
    if (r == CUDA_SUCCESS && bytes) *bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned)b;
    return r;
}

FC_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    REQUIRE_INIT();
    if (!uuid) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CHECK_DEV(dev);
    memcpy(uuid->bytes, fc_current_platform()->gpu[dev].uuid, 16);
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d", dev);
}

FC_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid(uuid, dev); /* same answer: no MIG instances here */
}

FC_API CUresult cuDeviceGetLuid(char *luid, unsigned int *mask, CUdevice dev)
{
    (void)luid; (void)mask;
    REQUIRE_INIT();
    CHECK_DEV(dev);
    API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "\"dev\":%d", dev); /* Windows only */
}

FC_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    REQUIRE_INIT();
    if (!pciBusId || len <= 0) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CHECK_DEV(dev);
    /* The driver's form: upper-case hex with a 4-digit domain ("0000:1B:00.0");
     * NCCL lower-cases it. */
    const fc_pci_addr *a = &fc_current_platform()->gpu[dev].pci;
    snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.%X", a->domain, a->bus, a->device, a->function);
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d,\"busid\":\"%s\"", dev, pciBusId);
}

FC_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    REQUIRE_INIT();
    fc_pci_addr a;
    if (!dev || !pciBusId) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    /* "bus:dev.fn" without a domain means domain 0. */
    char buf[64];
    if (strchr(pciBusId, ':') == strrchr(pciBusId, ':')) snprintf(buf, sizeof buf, "0:%s", pciBusId);
    else snprintf(buf, sizeof buf, "%s", pciBusId);
    if (fc_pci_parse(buf, &a)) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"busid\":\"%.32s\"", pciBusId);
    const fc_platform *p = fc_current_platform();
    for (int i = 0; i < p->ngpus; i++) {
        if (memcmp(&p->gpu[i].pci, &a, sizeof a) == 0) {
            *dev = i;
            API_RETURN(CUDA_SUCCESS, "\"busid\":\"%.32s\",\"dev\":%d", pciBusId, i);
        }
    }
    API_RETURN(CUDA_ERROR_INVALID_DEVICE, "\"busid\":\"%.32s\"", pciBusId);
}

/* GPUs of one simulated host all reach each other (NVLink/NVSwitch or PCIe P2P). */
FC_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    REQUIRE_INIT();
    if (!canAccessPeer) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CHECK_DEV(dev);
    CHECK_DEV(peerDev);
    *canAccessPeer = dev != peerDev;
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d,\"peer\":%d,\"can\":%d", dev, peerDev, *canAccessPeer);
}

FC_API CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice src,
                                        CUdevice dst)
{
    REQUIRE_INIT();
    if (!value) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CHECK_DEV(src);
    CHECK_DEV(dst);
    if (src == dst) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "\"src\":%d,\"dst\":%d", src, dst);
    bool nvlink = fc_current_platform()->gpu[src].nvlinks > 0 && fc_current_platform()->gpu[dst].nvlinks > 0;
    switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *value = nvlink ? 0 : 1; break;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED: *value = 1; break;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED: *value = nvlink; break;
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = 1; break;
    default: API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"attr\":%d", attrib);
    }
    API_RETURN(CUDA_SUCCESS, "\"attr\":%d,\"src\":%d,\"dst\":%d,\"value\":%d", attrib, src, dst, *value);
}

FC_API CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidth, CUarray_format format,
                                                   unsigned numChannels, CUdevice dev)
{
    (void)format; (void)numChannels;
    REQUIRE_INIT();
    if (!maxWidth) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CHECK_DEV(dev);
    *maxWidth = 268435456;
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d", dev);
}

FC_API CUresult cuDeviceGetProperties(CUdevprop *prop, CUdevice dev)
{
    REQUIRE_INIT();
    if (!prop) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CHECK_DEV(dev);
    bool k;
#define ATTR(n) fc_device_attribute(dev, CU_DEVICE_ATTRIBUTE_##n, &k)
    prop->maxThreadsPerBlock = ATTR(MAX_THREADS_PER_BLOCK);
    prop->maxThreadsDim[0] = ATTR(MAX_BLOCK_DIM_X);
    prop->maxThreadsDim[1] = ATTR(MAX_BLOCK_DIM_Y);
    prop->maxThreadsDim[2] = ATTR(MAX_BLOCK_DIM_Z);
    prop->maxGridSize[0] = ATTR(MAX_GRID_DIM_X);
    prop->maxGridSize[1] = ATTR(MAX_GRID_DIM_Y);
    prop->maxGridSize[2] = ATTR(MAX_GRID_DIM_Z);
    prop->sharedMemPerBlock = ATTR(MAX_SHARED_MEMORY_PER_BLOCK);
    prop->totalConstantMemory = ATTR(TOTAL_CONSTANT_MEMORY);
    prop->SIMDWidth = ATTR(WARP_SIZE);
    prop->memPitch = ATTR(MAX_PITCH);
    prop->regsPerBlock = ATTR(MAX_REGISTERS_PER_BLOCK);
    prop->clockRate = ATTR(CLOCK_RATE);
    prop->textureAlign = ATTR(TEXTURE_ALIGNMENT);
#undef ATTR
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d", dev);
}

FC_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    REQUIRE_INIT();
    if (!major || !minor) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CHECK_DEV(dev);
    *major = fc_current_platform()->gpu[dev].model->sm / 10;
    *minor = fc_current_platform()->gpu[dev].model->sm % 10;
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d", dev);
}

FC_API CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target,
                                           CUflushGPUDirectRDMAWritesScope scope)
{
    REQUIRE_INIT();
    /* Simulated memory is host memory: writes are already visible. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    API_RETURN(CUDA_SUCCESS, "\"target\":%d,\"scope\":%d", target, scope);
}
