/* NVML board and host facts beyond identity: memory bus, cores, VBIOS, board
 * and module ids, MIG and virtualisation modes, GSP firmware, more handle
 * lookups, and system-wide queries (excluded GPUs, S-class units, process
 * names, driver branch, GPM support). */
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "nvml_internal.h"

/* ---- board -------------------------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!busWidth) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->model->has[CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH]) return NVML_ERROR_NOT_SUPPORTED;
    *busWidth = (unsigned)gpu->model->attr[CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH];
    return NVML_SUCCESS;
}

/* CUDA cores: SMs x FP32 lanes per SM (64 on Volta, Turing and GA100, else 128). */
NVML_API nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *numCores)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!numCores) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->model->has[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT]) return NVML_ERROR_NOT_SUPPORTED;
    int sm = gpu->model->sm;
    unsigned lanes = sm == 70 || sm == 72 || sm == 75 || sm == 80 ? 64 : 128;
    *numCores = (unsigned)gpu->model->attr[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] * lanes;
    return NVML_SUCCESS;
}

/* VBIOS images of a GPU family share their leading number (88 Volta, 90
 * Turing, 92 GA100, 94 other Ampere, 95 Ada, 96 Hopper, 97 Blackwell); the
 * rest of the version is assumed. */
NVML_API nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    DEVICE_OR_RETURN(device, gpu);
    int sm = gpu->model->sm;
    int family = sm >= 100 ? 97 : sm == 90 ? 96 : sm == 89 ? 95 : sm > 80 ? 94 : sm == 80 ? 92
               : sm == 75 ? 90 : 88;
    char s[NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE];
    snprintf(s, sizeof s, "%d.00.00.00.01", family);
    return fcn_copy_string(version, length, s);
}

/* Unique per board: derived from its PCI address. */
NVML_API nvmlReturn_t nvmlDeviceGetBoardId(nvmlDevice_t device, unsigned int *boardId)
{
    DEVICE_OR_RETURN(device, gpu);
    const fc_pci_addr *a = &gpu->pci;
    return fcn_device_uint(device, boardId, (a->domain << 16) | (a->bus << 8) | (a->device << 3) | a->function);
}

/* One GPU per board (SXM modules and single-GPU PCIe cards). */
NVML_API nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device, unsigned int *multiGpuBool)
{
    return fcn_device_uint(device, multiGpuBool, 0);
}

NVML_API nvmlReturn_t nvmlDeviceOnSameBoard(nvmlDevice_t device1, nvmlDevice_t device2, int *onSameBoard)
{
    nvmlReturn_t r = fcn_device(device1, NULL);
    if (r || (r = fcn_device(device2, NULL))) return r;
    if (!onSameBoard) return NVML_ERROR_INVALID_ARGUMENT;
    *onSameBoard = device1 == device2;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetBusType(nvmlDevice_t device, nvmlBusType_t *type)
{
    return fcn_device_uint(device, type, NVML_BUS_TYPE_PCIE);
}

/* Assumed: modules sit in their slots in ordinal order (ids count from 1). */
NVML_API nvmlReturn_t nvmlDeviceGetModuleId(nvmlDevice_t device, unsigned int *moduleId)
{
    VALID_DEVICE_OR_RETURN(device);
    return fcn_device_uint(device, moduleId, device->index + 1);
}

/* What the GPU itself supports (the platform's link may run slower). */
NVML_API nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGenDevice)
{
    DEVICE_OR_RETURN(device, gpu);
    if (gpu->model->pcie_gen <= 0) return NVML_ERROR_NOT_SUPPORTED;
    return fcn_device_uint(device, maxLinkGenDevice, (unsigned)gpu->model->pcie_gen);
}

NVML_API nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *pVirtualMode)
{
    nvmlReturn_t r = fcn_device(device, NULL);
    if (r) return r;
    if (!pVirtualMode) return NVML_ERROR_INVALID_ARGUMENT;
    *pVirtualMode = NVML_GPU_VIRTUALIZATION_MODE_NONE; /* bare metal */
    return NVML_SUCCESS;
}

/* GSP firmware runs on Turing and later, by default with the drivers this
 * simulates; its version is the driver's. */
NVML_API nvmlReturn_t nvmlDeviceGetGspFirmwareMode(nvmlDevice_t device, unsigned int *isEnabled,
                                                   unsigned int *defaultMode)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!isEnabled || !defaultMode) return NVML_ERROR_INVALID_ARGUMENT;
    *isEnabled = *defaultMode = gpu->model->sm >= 75;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGspFirmwareVersion(nvmlDevice_t device, char *version)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu->model->sm < 75) return NVML_ERROR_NOT_SUPPORTED;
    return fcn_copy_string(version, NVML_GSP_FIRMWARE_VERSION_BUF_SIZE,
                           fcn_driver_version(fcn_platform()->driver_version));
}

/* ---- MIG: capable boards (GA100, Hopper, Blackwell) run with it disabled --------------------------- */

static int mig_capable(const fc_gpu *gpu)
{
    int sm = gpu->model->sm;
    return sm == 80 || sm == 90 || sm >= 100;
}

NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!currentMode || !pendingMode) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_capable(gpu)) return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = *pendingMode = NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

/* Every handle this library gives is a whole GPU. */
NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    return fcn_device_uint(device, isMigDevice, 0);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_capable(gpu)) return NVML_ERROR_NOT_SUPPORTED;
    *count = 7; /* seven GPU instances of the smallest profile */
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                          nvmlDevice_t *migDevice)
{
    DEVICE_OR_RETURN(device, gpu);
    (void)index;
    if (!migDevice) return NVML_ERROR_INVALID_ARGUMENT;
    return mig_capable(gpu) ? NVML_ERROR_NOT_FOUND : NVML_ERROR_NOT_SUPPORTED; /* MIG off: none */
}

NVML_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    nvmlReturn_t r = fcn_device(migDevice, NULL);
    if (r) return r;
    (void)device;
    return NVML_ERROR_INVALID_ARGUMENT; /* not a MIG device */
}

/* ---- more handle lookups ------------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device)
{
    const fc_platform *p = fcn_platform();
    if (!p) return NVML_ERROR_UNINITIALIZED;
    if (!serial || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < p->ngpus; i++) {
        char s[NVML_DEVICE_SERIAL_BUFFER_SIZE];
        fcn_serial(&p->gpu[i], s, sizeof s);
        if (strcmp(s, serial) == 0) {
            *device = fcn_handle((unsigned)i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const nvmlUUID_t *uuid, nvmlDevice_t *device)
{
    const fc_platform *p = fcn_platform();
    if (!p) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    if (uuid->version != nvmlUUID_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (uuid->type != NVML_UUID_TYPE_ASCII && uuid->type != NVML_UUID_TYPE_BINARY)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < p->ngpus; i++) {
        char s[48];
        fc_uuid_format(p->gpu[i].uuid, s, sizeof s);
        int match = uuid->type == NVML_UUID_TYPE_BINARY
                        ? memcmp(uuid->value.bytes, p->gpu[i].uuid, NVML_DEVICE_UUID_BINARY_LEN) == 0
                        : strncasecmp(uuid->value.str, s, NVML_DEVICE_UUID_ASCII_LEN) == 0;
        if (match) {
            *device = fcn_handle((unsigned)i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* The other GPUs reached at `level` or closer. *count 0 asks how many. */
NVML_API nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, nvmlGpuTopologyLevel_t level,
                                                       unsigned int *count, nvmlDevice_t *deviceArray)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!count || (level != NVML_TOPOLOGY_INTERNAL && level != NVML_TOPOLOGY_SINGLE &&
                   level != NVML_TOPOLOGY_MULTIPLE && level != NVML_TOPOLOGY_HOSTBRIDGE &&
                   level != NVML_TOPOLOGY_NODE && level != NVML_TOPOLOGY_SYSTEM))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (*count && !deviceArray) return NVML_ERROR_INVALID_ARGUMENT;
    const fc_platform *p = fcn_platform();
    unsigned n = 0;
    for (int i = 0; i < p->ngpus; i++) {
        if (&p->gpu[i] == gpu || fcn_topology_level(gpu, &p->gpu[i]) > level) continue;
        if (*count && n < *count) deviceArray[n] = fcn_handle((unsigned)i);
        n++;
    }
    if (*count && n > *count) n = *count;
    *count = n;
    return NVML_SUCCESS;
}

/* ---- system ------------------------------------------------------------------------------------- */

/* No GPU is excluded from use (NVreg_ExcludedGpus). */
NVML_API nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int *deviceCount)
{
    return fcn_system_uint(deviceCount, 0);
}

NVML_API nvmlReturn_t nvmlGetExcludedDeviceInfoByIndex(unsigned int index, nvmlExcludedDeviceInfo_t *info)
{
    nvmlReturn_t r = fcn_check_init();
    (void)index;
    (void)info;
    return r ? r : NVML_ERROR_INVALID_ARGUMENT; /* every index is past the count */
}

/* The names older headers use. */
NVML_API nvmlReturn_t nvmlGetBlacklistDeviceCount(unsigned int *deviceCount)
{
    return nvmlGetExcludedDeviceCount(deviceCount);
}

NVML_API nvmlReturn_t nvmlGetBlacklistDeviceInfoByIndex(unsigned int index, nvmlExcludedDeviceInfo_t *info)
{
    return nvmlGetExcludedDeviceInfoByIndex(index, info);
}

/* No S-class units (external GPU enclosures). */
NVML_API nvmlReturn_t nvmlUnitGetCount(unsigned int *unitCount)
{
    return fcn_system_uint(unitCount, 0);
}

NVML_API nvmlReturn_t nvmlUnitGetHandleByIndex(unsigned int index, nvmlUnit_t *unit)
{
    nvmlReturn_t r = fcn_check_init();
    (void)index;
    (void)unit;
    return r ? r : NVML_ERROR_INVALID_ARGUMENT;
}

/* No host bridge chips (HIC) either. */
NVML_API nvmlReturn_t nvmlSystemGetHicVersion(unsigned int *hwbcCount, nvmlHwbcEntry_t *hwbcEntries)
{
    nvmlReturn_t r = fcn_check_init();
    (void)hwbcEntries;
    if (r) return r;
    if (!hwbcCount) return NVML_ERROR_INVALID_ARGUMENT;
    *hwbcCount = 0;
    return NVML_SUCCESS;
}

/* The process's name: its argv[0], as /proc/<pid>/cmdline holds it. */
NVML_API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    nvmlReturn_t r = fcn_check_init();
    if (r) return r;
    if (!name || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%u/cmdline", pid);
    FILE *f = fopen(path, "r");
    if (!f) return NVML_ERROR_NOT_FOUND;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    if (n == 0) { /* kernel threads: their comm */
        snprintf(path, sizeof path, "/proc/%u/comm", pid);
        if (!(f = fopen(path, "r"))) return NVML_ERROR_NOT_FOUND;
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        buf[strcspn(buf, "\n")] = 0;
    }
    return fcn_copy_string(name, length, buf);
}

/* "r580_00": the release branch of the simulated driver. */
NVML_API nvmlReturn_t nvmlSystemGetDriverBranch(nvmlSystemDriverBranchInfo_t *branchInfo, unsigned int length)
{
    const fc_platform *p = fcn_platform();
    if (!p) return NVML_ERROR_UNINITIALIZED;
    if (!branchInfo) return NVML_ERROR_INVALID_ARGUMENT;
    if (branchInfo->version != nvmlSystemDriverBranchInfo_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    char s[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    unsigned major = 0;
    sscanf(fcn_driver_version(p->driver_version), "%u", &major);
    snprintf(s, sizeof s, "r%u_00", major);
    unsigned room = length < sizeof branchInfo->branch ? length : (unsigned)sizeof branchInfo->branch;
    return fcn_copy_string(branchInfo->branch, room, s);
}

/* Neither the CPUs nor the GPUs offer confidential computing. */
NVML_API nvmlReturn_t nvmlSystemGetConfComputeCapabilities(nvmlConfComputeSystemCaps_t *capabilities)
{
    nvmlReturn_t r = fcn_check_init();
    if (r) return r;
    if (!capabilities) return NVML_ERROR_INVALID_ARGUMENT;
    capabilities->cpuCaps = 0;
    capabilities->gpusCaps = 0;
    return NVML_SUCCESS;
}

/* GPU performance metrics (GPM) are not sampled: no device supports them. */
NVML_API nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport)
{
    nvmlReturn_t r = fcn_device(device, NULL);
    if (r) return r;
    if (!gpmSupport) return NVML_ERROR_INVALID_ARGUMENT;
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    gpmSupport->isSupportedDevice = 0;
    return NVML_SUCCESS;
}
