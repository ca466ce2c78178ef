/* NVML device queries: enumeration, identity, PCI, memory, clocks, power, affinity. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "nvml_internal.h"

/* Memory the driver/firmware keeps for itself (what nvidia-smi shows as
 * "Reserved": 454 MiB on an H100 80GB with driver 565). */
#define FCN_RESERVED_MEMORY (454ull << 20)
/* BAR1 an idle process sees in use. */
#define FCN_BAR1_USED (1ull << 20)

/* ---- enumeration -------------------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    const fc_platform *p = fcn_platform();
    if (!p) return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount) return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned)p->ngpus;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    const fc_platform *p = fcn_platform();
    if (!p) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned)p->ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    *device = fcn_handle(index);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* One hex number of 1..8 digits at *s; advances *s. */
static int parse_hex(const char **s, unsigned *out)
{
    unsigned v = 0;
    int n = 0;
    for (; isxdigit((unsigned char)**s); (*s)++, n++) {
        if (n == 8) return -1;
        int c = tolower((unsigned char)**s);
        v = v * 16 + (unsigned)(isdigit(c) ? c - '0' : c - 'a' + 10);
    }
    *out = v;
    return n ? 0 : -1;
}

/* NVML's accepted forms (hex): domain:bus:device.function, domain:bus:device,
 * bus:device.function; the domain may have 4 or 8 digits, any case. */
static int parse_bus_id(const char *s, fc_pci_addr *a)
{
    unsigned x[4];
    if (parse_hex(&s, &x[0]) || *s++ != ':' || parse_hex(&s, &x[1])) return -1;
    if (*s == ':') {
        s++;
        if (parse_hex(&s, &x[2])) return -1;
        x[3] = 0;
        if (*s == '.') {
            s++;
            if (parse_hex(&s, &x[3])) return -1;
        }
        *a = (fc_pci_addr){x[0], x[1], x[2], x[3]};
    } else if (*s == '.') {
        s++;
        if (parse_hex(&s, &x[2])) return -1;
        *a = (fc_pci_addr){0, x[0], x[1], x[2]};
    } else {
        return -1;
    }
    if (*s != 0 || a->bus > 0xff || a->device > 0x1f || a->function > 7) return -1;
    return 0;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    const fc_platform *p = fcn_platform();
    if (!p) return NVML_ERROR_UNINITIALIZED;
    if (!pciBusId || !device) return NVML_ERROR_INVALID_ARGUMENT;
    fc_pci_addr a;
    if (parse_bus_id(pciBusId, &a)) return NVML_ERROR_INVALID_ARGUMENT;
    int i = fcn_gpu_at(p, &a);
    if (i < 0) return NVML_ERROR_NOT_FOUND;
    *device = fcn_handle((unsigned)i);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    const fc_platform *p = fcn_platform();
    if (!p) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < p->ngpus; i++) {
        char s[48];
        fc_uuid_format(p->gpu[i].uuid, s, sizeof s);
        if (strcasecmp(s, uuid) == 0) {
            *device = fcn_handle((unsigned)i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    VALID_DEVICE_OR_RETURN(device);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    VALID_DEVICE_OR_RETURN(device);
    if (!minorNumber) return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = device->index; /* /dev/nvidiaN */
    return NVML_SUCCESS;
}

/* ---- identity ----------------------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    DEVICE_OR_RETURN(device, gpu);
    return fcn_copy_string(name, length, gpu->model->name);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    DEVICE_OR_RETURN(device, gpu);
    char s[48];
    fc_uuid_format(gpu->uuid, s, sizeof s);
    return fcn_copy_string(uuid, length, s);
}

void fcn_serial(const fc_gpu *gpu, char *buf, size_t len)
{
    /* 13 decimal digits like real boards, derived from the UUID (FNV-1a). */
    unsigned long long h = 1469598103934665603ull;
    for (int i = 0; i < 16; i++) h = (h ^ gpu->uuid[i]) * 1099511628211ull;
    snprintf(buf, len, "1%012llu", h % 1000000000000ull);
}

NVML_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    DEVICE_OR_RETURN(device, gpu);
    char s[NVML_DEVICE_SERIAL_BUFFER_SIZE];
    fcn_serial(gpu, s, sizeof s);
    return fcn_copy_string(serial, length, s);
}

NVML_API nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber,
                                                   unsigned int length)
{
    DEVICE_OR_RETURN(device, gpu);
    static const struct {
        const char *key, *part;
    } parts[] = {
        {"h100", "692-2G520-0200-000"}, /* seen on a real HGX H100 */
        {"a100", "692-2G506-0212-002"},
        {"l40s", "900-2G133-0080-000"},
    };
    const char *part = "900-2G500-0000-000";
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (strcmp(gpu->model->key, parts[i].key) == 0) part = parts[i].part;
    return fcn_copy_string(partNumber, length, part);
}

NVML_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    VALID_DEVICE_OR_RETURN(device);
    if (!type) return NVML_ERROR_INVALID_ARGUMENT;
    *type = NVML_BRAND_NVIDIA; /* data-center boards report "NVIDIA" with current drivers */
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!arch) return NVML_ERROR_INVALID_ARGUMENT;
    int sm = gpu->model->sm;
    *arch = sm >= 100 && sm < 130 ? NVML_DEVICE_ARCH_BLACKWELL
          : sm == 90            ? NVML_DEVICE_ARCH_HOPPER
          : sm == 89            ? NVML_DEVICE_ARCH_ADA
          : sm >= 80 && sm < 89 ? NVML_DEVICE_ARCH_AMPERE
          : sm == 75            ? NVML_DEVICE_ARCH_TURING
          : sm >= 70 && sm < 75 ? NVML_DEVICE_ARCH_VOLTA
          : sm >= 60 && sm < 70 ? NVML_DEVICE_ARCH_PASCAL
          : sm >= 50 && sm < 60 ? NVML_DEVICE_ARCH_MAXWELL
          : sm >= 30 && sm < 50 ? NVML_DEVICE_ARCH_KEPLER
                                : NVML_DEVICE_ARCH_UNKNOWN;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = gpu->model->sm / 10;
    *minor = gpu->model->sm % 10;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    return fcn_device_uint(device, (unsigned int *)mode, NVML_COMPUTEMODE_DEFAULT);
}

NVML_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    /* disabled, as on the HGX H100 captures the models come from */
    return fcn_device_uint(device, (unsigned int *)mode, NVML_FEATURE_DISABLED);
}

/* ---- PCI ---------------------------------------------------------------------------------------- */

void fcn_fill_pci(nvmlPciInfo_t *out, const fc_pci_addr *a, unsigned device_id, unsigned subsys_id)
{
    /* Only the string's bytes are written (no padding to the end of busId). */
    snprintf(out->busIdLegacy, sizeof out->busIdLegacy, "%04X:%02X:%02X.%X", a->domain & 0xffff,
             a->bus, a->device, a->function);
    out->domain = a->domain;
    out->bus = a->bus;
    out->device = a->device;
    out->pciDeviceId = device_id ? (device_id << 16) | FCN_PCI_VENDOR_NVIDIA : 0;
    out->pciSubSystemId = subsys_id ? (subsys_id << 16) | FCN_PCI_VENDOR_NVIDIA : 0;
    snprintf(out->busId, sizeof out->busId, "%08X:%02X:%02X.%X", a->domain, a->bus, a->device,
             a->function);
}

void fcn_fill_pci_legacy(ncclsim_nvmlPciInfoLegacy_t *out, const fc_pci_addr *a, unsigned device_id,
                         unsigned subsys_id)
{
    memset(out, 0, sizeof *out);
    snprintf(out->busId, sizeof out->busId, "%04X:%02X:%02X.%X", a->domain & 0xffff, a->bus,
             a->device, a->function);
    out->domain = a->domain;
    out->bus = a->bus;
    out->device = a->device;
    out->pciDeviceId = device_id ? (device_id << 16) | FCN_PCI_VENDOR_NVIDIA : 0;
    out->pciSubSystemId = subsys_id ? (subsys_id << 16) | FCN_PCI_VENDOR_NVIDIA : 0;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    fcn_fill_pci(pci, &gpu->pci, gpu->model->pci_device_id, gpu->model->pci_subsystem_id);
    return NVML_SUCCESS;
}

/* _v1 and _v2 fill the 52-byte layout of NVML <= 8 (see nvml_types.h). */
NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, ncclsim_nvmlPciInfoLegacy_t *pci)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    fcn_fill_pci_legacy(pci, &gpu->pci, gpu->model->pci_device_id, gpu->model->pci_subsystem_id);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, ncclsim_nvmlPciInfoLegacy_t *pci)
{
    return nvmlDeviceGetPciInfo_v2(device, pci);
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    if (pci->version != nvmlPciInfoExt_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const fc_pci_addr *a = &gpu->pci;
    pci->domain = a->domain;
    pci->bus = a->bus;
    pci->device = a->device;
    pci->pciDeviceId = (gpu->model->pci_device_id << 16) | FCN_PCI_VENDOR_NVIDIA;
    pci->pciSubSystemId = (gpu->model->pci_subsystem_id << 16) | FCN_PCI_VENDOR_NVIDIA;
    pci->baseClass = 0x03; /* display controller */
    pci->subClass = 0x02;  /* 3D controller (class 0x0302, as data-center GPUs) */
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", a->domain, a->bus, a->device,
             a->function);
    return NVML_SUCCESS;
}

static nvmlReturn_t pcie_value(nvmlDevice_t device, unsigned int *out, int width)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    int v = width ? gpu->pcie_width : gpu->pcie_gen;
    if (v <= 0) return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned)v;
    return NVML_SUCCESS;
}

/* A simulated link runs at what the board supports: current == max. */
NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen)
{
    return pcie_value(device, currLinkGen, 0);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen)
{
    return pcie_value(device, maxLinkGen, 0);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth)
{
    return pcie_value(device, currLinkWidth, 1);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth)
{
    return pcie_value(device, maxLinkWidth, 1);
}

/* Real NVML answers an NVML_PCIE_LINK_MAX_SPEED_* code (= the generation), not MB/s. */
NVML_API nvmlReturn_t nvmlDeviceGetPcieLinkMaxSpeed(nvmlDevice_t device, unsigned int *maxSpeed)
{
    nvmlReturn_t r = pcie_value(device, maxSpeed, 0);
    if (r == NVML_SUCCESS && *maxSpeed > NVML_PCIE_LINK_MAX_SPEED_64000MBPS)
        *maxSpeed = NVML_PCIE_LINK_MAX_SPEED_INVALID;
    return r;
}

/* Current link speed in MT/s per lane (2500 for Gen1 ... 32000 for Gen5). */
NVML_API nvmlReturn_t nvmlDeviceGetPcieSpeed(nvmlDevice_t device, unsigned int *pcieSpeed)
{
    unsigned gen;
    nvmlReturn_t r = pcie_value(device, &gen, 0);
    if (r) return r;
    if (!pcieSpeed) return NVML_ERROR_INVALID_ARGUMENT;
    static const unsigned mts[] = {0, 2500, 5000, 8000, 16000, 32000, 64000};
    if (gen >= sizeof mts / sizeof mts[0]) return NVML_ERROR_NOT_SUPPORTED;
    *pcieSpeed = mts[gen];
    return NVML_SUCCESS;
}

/* ---- memory ------------------------------------------------------------------------------------- */

static unsigned long long reserved_memory(const fc_gpu *gpu)
{
    return FCN_RESERVED_MEMORY < gpu->memory / 8 ? FCN_RESERVED_MEMORY : gpu->memory / 8;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long reserved = reserved_memory(gpu), allocated = fcn_allocated(gpu, reserved);
    memory->total = gpu->memory;
    memory->used = reserved + allocated; /* v1 counts the reserved part as used */
    memory->free = gpu->memory - reserved - allocated;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long reserved = reserved_memory(gpu), allocated = fcn_allocated(gpu, reserved);
    memory->total = gpu->memory;
    memory->reserved = reserved;
    memory->used = allocated;
    memory->free = gpu->memory - reserved - allocated;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!bar1Memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->model->bar1_mib) return NVML_ERROR_NOT_SUPPORTED;
    bar1Memory->bar1Total = (unsigned long long)gpu->model->bar1_mib << 20;
    bar1Memory->bar1Used = FCN_BAR1_USED;
    bar1Memory->bar1Free = bar1Memory->bar1Total - FCN_BAR1_USED;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t device,
                                                          nvmlConfComputeMemSizeInfo_t *memInfo)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!memInfo) return NVML_ERROR_INVALID_ARGUMENT;
    /* Confidential compute is off: nothing is protected. */
    memInfo->protectedMemSizeKib = 0;
    memInfo->unprotectedMemSizeKib = gpu->memory >> 10;
    return NVML_SUCCESS;
}

/* A simulated GPU has no ECC errors. Texture memory and CBU have no counters
 * since Volta; the other locations count (zero). */
NVML_API nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                      nvmlEccCounterType_t counterType,
                                                      nvmlMemoryLocation_t locationType,
                                                      unsigned long long *count)
{
    VALID_DEVICE_OR_RETURN(device);
    if (!count || (unsigned)errorType >= NVML_MEMORY_ERROR_TYPE_COUNT ||
        (unsigned)counterType >= NVML_ECC_COUNTER_TYPE_COUNT ||
        (unsigned)locationType >= NVML_MEMORY_LOCATION_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (locationType == NVML_MEMORY_LOCATION_TEXTURE_MEMORY ||
        locationType == NVML_MEMORY_LOCATION_TEXTURE_SHM || locationType == NVML_MEMORY_LOCATION_CBU)
        return NVML_ERROR_NOT_SUPPORTED;
    *count = 0;
    return NVML_SUCCESS;
}

/* ---- clocks and power --------------------------------------------------------------------------- */

nvmlReturn_t fcn_max_clock(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!clock) return NVML_ERROR_INVALID_ARGUMENT;
    const fc_gpu_model *m = gpu->model;
    unsigned v;
    switch (type) {
    case NVML_CLOCK_GRAPHICS: v = m->clock_graphics_mhz; break;
    case NVML_CLOCK_SM: v = m->clock_sm_mhz; break;
    case NVML_CLOCK_MEM: v = m->clock_memory_mhz; break;
    case NVML_CLOCK_VIDEO: v = m->clock_video_mhz; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    *clock = v;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                unsigned int *clock)
{
    return fcn_max_clock(device, type, clock);
}

/* A simulated GPU always runs at its maximum clocks. */
NVML_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                             unsigned int *clock)
{
    return fcn_max_clock(device, type, clock);
}

static nvmlReturn_t power_limit(nvmlDevice_t device, unsigned int *limit)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!limit) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->model->power_limit_w) return NVML_ERROR_NOT_SUPPORTED;
    *limit = gpu->model->power_limit_w * 1000u; /* milliwatts */
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    return power_limit(device, limit);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device,
                                                               unsigned int *defaultLimit)
{
    return power_limit(device, defaultLimit);
}

NVML_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return power_limit(device, limit);
}

/* ---- NUMA and CPU affinity ---------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!node) return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu->numa_node < 0) return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned)gpu->numa_node;
    return NVML_SUCCESS;
}

/* Set the bits of a Linux cpulist ("0-55,112-167") in set[size]; -1 if unreadable. */
static int read_cpulist(const char *path, unsigned long *set, unsigned size)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const unsigned bits = 8 * sizeof(unsigned long);
    int any = 0;
    for (char *s = buf; *s && *s != '\n';) {
        char *end;
        unsigned long lo = strtoul(s, &end, 10), hi = lo;
        if (end == s) return -1;
        s = end;
        if (*s == '-') {
            hi = strtoul(s + 1, &end, 10);
            if (end == s + 1) return -1;
            s = end;
        }
        for (unsigned long c = lo; c <= hi && c / bits < size; c++) set[c / bits] |= 1ul << (c % bits);
        any = 1;
        if (*s == ',') s++;
    }
    return any ? 0 : -1;
}

static nvmlReturn_t cpu_affinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!cpuSet || cpuSetSize == 0) return NVML_ERROR_INVALID_ARGUMENT;
    memset(cpuSet, 0, cpuSetSize * sizeof *cpuSet);
    /* The simulated GPU's NUMA node when this machine has it, else every CPU here. */
    if (gpu->numa_node >= 0) {
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", gpu->numa_node);
        if (read_cpulist(path, cpuSet, cpuSetSize) == 0) return NVML_SUCCESS;
        memset(cpuSet, 0, cpuSetSize * sizeof *cpuSet);
    }
    if (read_cpulist("/sys/devices/system/cpu/online", cpuSet, cpuSetSize) == 0) return NVML_SUCCESS;
    memset(cpuSet, 0, cpuSetSize * sizeof *cpuSet);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const unsigned bits = 8 * sizeof(unsigned long);
    for (long c = 0; c < (ncpu > 0 ? ncpu : 1) && (unsigned long)c / bits < cpuSetSize; c++)
        cpuSet[c / bits] |= 1ul << (c % bits);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                               unsigned long *cpuSet)
{
    return cpu_affinity(device, cpuSetSize, cpuSet);
}

NVML_API nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize,
                                                          unsigned long *cpuSet, nvmlAffinityScope_t scope)
{
    if (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET) {
        nvmlReturn_t r = fcn_device(device, NULL);
        return r ? r : NVML_ERROR_INVALID_ARGUMENT;
    }
    return cpu_affinity(device, cpuSetSize, cpuSet); /* one NUMA node per socket */
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize,
                                                  unsigned long *nodeSet, nvmlAffinityScope_t scope)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!nodeSet || nodeSetSize == 0 ||
        (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu->numa_node < 0) return NVML_ERROR_NOT_SUPPORTED;
    const unsigned bits = 8 * sizeof(unsigned long);
    if ((unsigned)gpu->numa_node / bits >= nodeSetSize) return NVML_ERROR_INSUFFICIENT_SIZE;
    memset(nodeSet, 0, nodeSetSize * sizeof *nodeSet);
    nodeSet[(unsigned)gpu->numa_node / bits] = 1ul << ((unsigned)gpu->numa_node % bits);
    return NVML_SUCCESS;
}
