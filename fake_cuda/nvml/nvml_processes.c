/* NVML process listings: which processes use a GPU, and how much.
 *
 * The simulated GPUs list no process: every listing answers an empty one
 * through NVML's count protocol (count 0, NVML_SUCCESS, the caller's array
 * untouched). A real listing would need the driver (libcuda.so.1 in each rank)
 * to publish, per simulated GPU (UUID), the pids holding a context and the
 * bytes each has allocated, somewhere every process of the host can read
 * (a per-host file or shared memory under the run directory, dead pids
 * pruned), for these functions to report. */
#include <stddef.h>

#include "nvml_internal.h"

/* The count protocol with no process: *infoCount becomes 0, whatever array. */
static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
    nvmlReturn_t r = fcn_device(device, NULL);
    if (r) return r;
    if (!infoCount) return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

#define EMPTY_LISTING(name, info_t)                                                                  \
    NVML_API nvmlReturn_t name(nvmlDevice_t device, unsigned int *infoCount, info_t *infos)        \
    {                                                                                                \
        (void)infos;                                                                                 \
        return no_processes(device, infoCount);                                                      \
    }

/* Unversioned names: the v1 layout; _v2 and _v3 share the current one. */
EMPTY_LISTING(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)
EMPTY_LISTING(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
EMPTY_LISTING(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t)
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
    nvmlReturn_t r = fcn_device(device, NULL);
    if (r) return r;
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}
