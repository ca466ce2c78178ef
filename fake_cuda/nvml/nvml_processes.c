/* NVML process listings: which processes use a GPU, and how much.
 *
 * Compute processes are those whose driver holds a context or memory on the
 * simulated GPU, as each rank's libcuda.so.1 publishes them in its host's
 * directory (common/processes.h), with the bytes it has allocated there.
 * Graphics and MPS listings are empty: the simulation runs neither. */
#include <stddef.h>

#include "nvml_internal.h"
#include "processes.h"

#define MAX_LISTED 1024 /* processes on one GPU, more than a host runs */
#define NO_INSTANCE 0xFFFFFFFFu /* gpuInstanceId/computeInstanceId without MIG */

/* The count protocol with no process: *infoCount becomes 0, whatever array. */
static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
    nvmlReturn_t r = fcn_device(device, NULL);
    if (r) return r;
    if (!infoCount) return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

/* NVML's count protocol over the GPU's compute processes: all of them into
 * infos when *infoCount holds them (NVML_SUCCESS), else the count needed and
 * NVML_ERROR_INSUFFICIENT_SIZE; `v1`: the layout without instance ids. */
static nvmlReturn_t compute_processes(nvmlDevice_t device, unsigned int *infoCount, void *infos, int v1)
{
    const fc_gpu *gpu;
    nvmlReturn_t r = fcn_device(device, &gpu);
    if (r) return r;
    if (!infoCount) return NVML_ERROR_INVALID_ARGUMENT;
    static __thread fc_gpu_process found[MAX_LISTED];
    int n = fc_processes_on(gpu, found, MAX_LISTED);
    if (n > MAX_LISTED) n = MAX_LISTED;
    unsigned room = *infoCount;
    *infoCount = (unsigned)n;
    if ((unsigned)n > room) return NVML_ERROR_INSUFFICIENT_SIZE;
    if (n && !infos) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < n; i++) {
        if (v1)
            ((nvmlProcessInfo_v1_t *)infos)[i] = (nvmlProcessInfo_v1_t){(unsigned)found[i].pid, found[i].bytes};
        else
            ((nvmlProcessInfo_t *)infos)[i] =
                (nvmlProcessInfo_t){(unsigned)found[i].pid, found[i].bytes, NO_INSTANCE, NO_INSTANCE};
    }
    return NVML_SUCCESS;
}

unsigned long long fcn_allocated(const fc_gpu *gpu, unsigned long long reserved)
{
    static __thread fc_gpu_process found[MAX_LISTED];
    int n = fc_processes_on(gpu, found, MAX_LISTED);
    unsigned long long sum = 0, room = gpu->memory - reserved;
    for (int i = 0; i < n && i < MAX_LISTED; i++) sum += found[i].bytes;
    return sum < room ? sum : room;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                           nvmlProcessInfo_v1_t *infos)
{
    return compute_processes(device, infoCount, infos, 1);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_v2_t *infos)
{
    return compute_processes(device, infoCount, infos, 0);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_t *infos)
{
    return compute_processes(device, infoCount, infos, 0);
}

#define EMPTY_LISTING(name, info_t)                                                                  \
    NVML_API nvmlReturn_t name(nvmlDevice_t device, unsigned int *infoCount, info_t *infos)        \
    {                                                                                                \
        (void)infos;                                                                                 \
        return no_processes(device, infoCount);                                                      \
    }

/* Unversioned names: the v1 layout; _v2 and _v3 share the current one. */
EMPTY_LISTING(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
EMPTY_LISTING(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t)
EMPTY_LISTING(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t)
EMPTY_LISTING(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t)
EMPTY_LISTING(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
EMPTY_LISTING(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t)

NVML_API nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device, nvmlProcessDetailList_t *plist)
{
    nvmlReturn_t r = fcn_device(device, NULL);
    if (r) return r;
    if (!plist) return NVML_ERROR_INVALID_ARGUMENT;
    if (plist->version != nvmlProcessDetailList_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (plist->mode > NCCLSIM_NVML_PROCESS_MODE_MAX) return NVML_ERROR_INVALID_ARGUMENT;
    plist->numProcArrayEntries = 0;
    return NVML_SUCCESS;
}

/* Per-process utilisation: no samples, which NVML answers NOT_FOUND. */
NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                                      unsigned int *processSamplesCount,
                                                      unsigned long long lastSeenTimeStamp)
{
    (void)utilization;
    (void)lastSeenTimeStamp;
    nvmlReturn_t r = no_processes(device, processSamplesCount);
    return r ? r : NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                            nvmlProcessesUtilizationInfo_t *procesesUtilInfo)
{
    nvmlReturn_t r = fcn_device(device, NULL);
    if (r) return r;
    if (!procesesUtilInfo) return NVML_ERROR_INVALID_ARGUMENT;
    if (procesesUtilInfo->version != nvmlProcessesUtilizationInfo_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    procesesUtilInfo->processSamplesCount = 0;
    return NVML_ERROR_NOT_FOUND;
}

/* Accounting is off (it is opt-in, nvidia-smi -am 1). */
NVML_API nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    return fcn_device_uint(device, (unsigned int *)mode, NVML_FEATURE_DISABLED);
}
