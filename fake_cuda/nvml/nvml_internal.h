/* Shared state of the fake NVML: initialisation count and device handles. */
#ifndef NCCLSIM_NVML_INTERNAL_H
#define NCCLSIM_NVML_INTERNAL_H

#include "nvml_types.h"
#include "platform.h"

#define NVML_API __attribute__((visibility("default")))

/* What an nvmlDevice_t points to: one per simulated GPU, in static storage, so
 * handles stay valid (and equal) across nvmlShutdown/nvmlInit. */
struct nvmlDevice_st {
    unsigned magic;
    unsigned index;
    const fc_gpu *gpu;
};
#define FCN_DEVICE_MAGIC 0x6e766d6cu /* "nvml" */

/* The platform while NVML is initialised, else NULL. */
const fc_platform *fcn_platform(void);

/* NVML_SUCCESS when initialised, else NVML_ERROR_UNINITIALIZED. */
nvmlReturn_t fcn_check_init(void);

/* Handle of GPU i (i < ngpus), valid once nvmlInit succeeded. */
nvmlDevice_t fcn_handle(unsigned i);

/* Validate a handle: initialised first (UNINITIALIZED), then the handle
 * (INVALID_ARGUMENT). On success *gpu is its GPU. */
nvmlReturn_t fcn_device(nvmlDevice_t device, const fc_gpu **gpu);

/* In a function returning nvmlReturn_t: declare `gpu`, the device's GPU, or
 * return fcn_device's error. */
#define DEVICE_OR_RETURN(device, gpu)                                                         \
    const fc_gpu *gpu;                                                                        \
    do {                                                                                      \
        nvmlReturn_t r_ = fcn_device((device), &gpu);                                         \
        if (r_ != NVML_SUCCESS) return r_;                                                    \
    } while (0)

/* The same where the GPU itself is not needed. */
#define VALID_DEVICE_OR_RETURN(device)                                                        \
    do {                                                                                      \
        nvmlReturn_t r_ = fcn_device((device), NULL);                                         \
        if (r_ != NVML_SUCCESS) return r_;                                                    \
    } while (0)

/* A getter of one value: *out = v for a valid device (INVALID_ARGUMENT for a
 * NULL out). Enum outputs are unsigned int-sized, as NVML's ABI has them. */
nvmlReturn_t fcn_device_uint(nvmlDevice_t device, unsigned int *out, unsigned v);

/* The same for a system-wide value: UNINITIALIZED before nvmlInit. */
nvmlReturn_t fcn_system_uint(unsigned int *out, unsigned v);

/* What the processes on the GPU have allocated (nvml_processes.c), at most
 * what `reserved` leaves of its memory. */
unsigned long long fcn_allocated(const fc_gpu *gpu, unsigned long long reserved);

/* Copy a NUL-terminated string into an NVML caller's buffer of `length` bytes. */
nvmlReturn_t fcn_copy_string(char *dst, unsigned length, const char *src);

/* The GPU of this host whose PCI address is a, or -1. */
int fcn_gpu_at(const fc_platform *p, const fc_pci_addr *a);

/* Fill the PCI identity fields of a GPU (ids, domain/bus/device) and both
 * bus-id strings. */
void fcn_fill_pci(nvmlPciInfo_t *out, const fc_pci_addr *a, unsigned device_id, unsigned subsys_id);
void fcn_fill_pci_legacy(ncclsim_nvmlPciInfoLegacy_t *out, const fc_pci_addr *a, unsigned device_id,
                         unsigned subsys_id);

#define FCN_PCI_VENDOR_NVIDIA 0x10deu

/* The model's maximum clock of a type (what a simulated GPU always runs at). */
nvmlReturn_t fcn_max_clock(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock);

/* The board serial number NVML reports for a GPU (13 digits). */
void fcn_serial(const fc_gpu *gpu, char *buf, size_t len);

/* The Linux driver version ("580.65.06") that ships with a CUDA version (13000). */
const char *fcn_driver_version(int cuda);

/* How two GPUs of this host reach each other over PCIe. */
nvmlGpuTopologyLevel_t fcn_topology_level(const fc_gpu *a, const fc_gpu *b);

#endif
