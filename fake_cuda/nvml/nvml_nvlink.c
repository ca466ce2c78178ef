/* NVML NVLink, P2P and topology queries, field values, GPU fabric. */
#include <string.h>
#include <time.h>

#include "nvml_internal.h"

/* PCI device ids NVSwitches show on the other end of a GPU's links. */
#define NVSWITCH_GEN2_DEVICE_ID 0x1af1 /* DGX/HGX A100 */
#define NVSWITCH_GEN3_DEVICE_ID 0x22a3 /* DGX/HGX H100/H200 */

/* Links a board has (the model's, or more if the platform wires more). */
static int links_present(const fc_gpu *g)
{
    int n = g->model->nvlinks > g->nvlinks ? g->model->nvlinks : g->nvlinks;
    return n > FC_MAX_NVLINKS ? FC_MAX_NVLINKS : n;
}

/* The platform's links 0..nvlinks-1 are trained and up; any others are down. */
static int link_active(const fc_gpu *g, unsigned link)
{
    return link < (unsigned)g->nvlinks;
}

/* Per-direction speed of one link in MB/s, as nvidia-smi nvlink -s shows it. */
static unsigned link_speed_mbps(const fc_gpu *g)
{
    switch (g->model->nvlink_version) {
    case 1: return 20000;
    case 2: return 25781;
    case 3: return 25000;
    case 4: return 26562;
    case 5: return 53125;
    default: return 25000;
    }
}

static unsigned link_version_code(const fc_gpu *g)
{
    switch (g->model->nvlink_version) {
    case 1: return NVML_NVLINK_VERSION_1_0;
    case 2: return NVML_NVLINK_VERSION_2_0;
    case 3: return NVML_NVLINK_VERSION_3_0;
    case 4: return NVML_NVLINK_VERSION_4_0;
    case 5: return NVML_NVLINK_VERSION_5_0;
    case 6: return NVML_NVLINK_VERSION_6_0;
    default: return NVML_NVLINK_VERSION_INVALID;
    }
}

static int same_pci(const fc_pci_addr *a, const fc_pci_addr *b)
{
    return a->domain == b->domain && a->bus == b->bus && a->device == b->device &&
           a->function == b->function;
}

/* Validate device and link: NOT_SUPPORTED without NVLink, INVALID_ARGUMENT past the last link. */
static nvmlReturn_t link_of(nvmlDevice_t device, unsigned link, const fc_gpu **gpu)
{
    nvmlReturn_t r = fcn_device(device, gpu);
    if (r) return r;
    int n = links_present(*gpu);
    if (n == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (unsigned)n) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                               nvmlEnableState_t *isActive)
{
    const fc_gpu *gpu;
    nvmlReturn_t r = link_of(device, link, &gpu);
    if (r) return r;
    if (!isActive) return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = link_active(gpu, link) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link,
                                                 unsigned int *version)
{
    const fc_gpu *gpu;
    nvmlReturn_t r = link_of(device, link, &gpu);
    if (r) return r;
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned v = link_version_code(gpu);
    if (v == NVML_NVLINK_VERSION_INVALID) return NVML_ERROR_NOT_SUPPORTED;
    *version = v;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link,
                                                    nvmlNvLinkCapability_t capability,
                                                    unsigned int *capResult)
{
    const fc_gpu *gpu;
    nvmlReturn_t r = link_of(device, link, &gpu);
    if (r) return r;
    if (!capResult) return NVML_ERROR_INVALID_ARGUMENT;
    switch (capability) {
    case NVML_NVLINK_CAP_P2P_SUPPORTED:
    case NVML_NVLINK_CAP_P2P_ATOMICS:
    case NVML_NVLINK_CAP_VALID: *capResult = 1; break;
    /* x86 hosts: no CPU memory behind NVLink, no SLI. */
    case NVML_NVLINK_CAP_SYSMEM_ACCESS:
    case NVML_NVLINK_CAP_SYSMEM_ATOMICS:
    case NVML_NVLINK_CAP_SLI_BRIDGE: *capResult = 0; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

/* What is at the far end of an up link: PCI address and ids. */
static nvmlReturn_t remote_of(nvmlDevice_t device, unsigned link, const fc_pci_addr **addr,
                              unsigned *device_id, unsigned *subsys_id, int *is_gpu)
{
    const fc_gpu *gpu;
    nvmlReturn_t r = link_of(device, link, &gpu);
    if (r) return r;
    if (!link_active(gpu, link)) return NVML_ERROR_NOT_SUPPORTED;
    const fc_platform *p = fcn_platform();
    *addr = &gpu->nvlink_remote[link];
    int peer = fcn_gpu_at(p, *addr);
    *is_gpu = peer >= 0;
    if (peer >= 0) {
        *device_id = p->gpu[peer].model->pci_device_id;
        *subsys_id = p->gpu[peer].model->pci_subsystem_id;
    } else {
        int v = gpu->model->nvlink_version;
        *device_id = v >= 4 ? NVSWITCH_GEN3_DEVICE_ID : v == 3 ? NVSWITCH_GEN2_DEVICE_ID : 0;
        *subsys_id = 0;
    }
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                          nvmlPciInfo_t *pci)
{
    const fc_pci_addr *a;
    unsigned dev_id, sub_id;
    int is_gpu;
    nvmlReturn_t r = remote_of(device, link, &a, &dev_id, &sub_id, &is_gpu);
    if (r) return r;
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    fcn_fill_pci(pci, a, dev_id, sub_id);
    return NVML_SUCCESS;
}

/* The unversioned entry point fills the 52-byte layout of NVML <= 8 (NCCL calls it). */
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                                       ncclsim_nvmlPciInfoLegacy_t *pci)
{
    const fc_pci_addr *a;
    unsigned dev_id, sub_id;
    int is_gpu;
    nvmlReturn_t r = remote_of(device, link, &a, &dev_id, &sub_id, &is_gpu);
    if (r) return r;
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    fcn_fill_pci_legacy(pci, a, dev_id, sub_id);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                          nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType)
{
    const fc_pci_addr *a;
    unsigned dev_id, sub_id;
    int is_gpu;
    nvmlReturn_t r = remote_of(device, link, &a, &dev_id, &sub_id, &is_gpu);
    if (r) return r;
    if (!pNvLinkDeviceType) return NVML_ERROR_INVALID_ARGUMENT;
    *pNvLinkDeviceType = is_gpu ? NVML_NVLINK_DEVICE_TYPE_GPU : NVML_NVLINK_DEVICE_TYPE_SWITCH;
    return NVML_SUCCESS;
}

/* A simulated link counts no errors. */
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                                      nvmlNvLinkErrorCounter_t counter,
                                                      unsigned long long *counterValue)
{
    const fc_gpu *gpu;
    nvmlReturn_t r = link_of(device, link, &gpu);
    if (r) return r;
    if (!counterValue || (unsigned)counter >= NVML_NVLINK_ERROR_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    *counterValue = 0;
    return NVML_SUCCESS;
}

/* ---- P2P and topology ---------------------------------------------------------------------------- */

/* Two GPUs of this host talk over NVLink when one links to the other or both
 * link to the same NVSwitch. */
static int nvlink_connected(const fc_platform *p, const fc_gpu *a, const fc_gpu *b)
{
    for (int i = 0; i < a->nvlinks; i++)
        if (same_pci(&a->nvlink_remote[i], &b->pci)) return 1;
    for (int j = 0; j < b->nvlinks; j++)
        if (same_pci(&b->nvlink_remote[j], &a->pci)) return 1;
    for (int i = 0; i < a->nvlinks; i++) {
        if (fcn_gpu_at(p, &a->nvlink_remote[i]) >= 0) continue;
        for (int j = 0; j < b->nvlinks; j++)
            if (same_pci(&a->nvlink_remote[i], &b->nvlink_remote[j])) return 1;
    }
    return 0;
}

NVML_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                             nvmlGpuP2PCapsIndex_t p2pIndex,
                                             nvmlGpuP2PStatus_t *p2pStatus)
{
    const fc_gpu *a, *b;
    nvmlReturn_t r = fcn_device(device1, &a);
    if (r) return r;
    if ((r = fcn_device(device2, &b))) return r;
    if (!p2pStatus) return NVML_ERROR_INVALID_ARGUMENT;
    int nvlink = a != b && nvlink_connected(fcn_platform(), a, b);
    switch (p2pIndex) {
    /* Every pair of GPUs of a simulated host can read and write each other. */
    case NVML_P2P_CAPS_INDEX_READ:
    case NVML_P2P_CAPS_INDEX_WRITE:
    case NVML_P2P_CAPS_INDEX_PCI: *p2pStatus = NVML_P2P_STATUS_OK; break;
    case NVML_P2P_CAPS_INDEX_NVLINK:
    case NVML_P2P_CAPS_INDEX_ATOMICS:
        *p2pStatus = nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

/* Each GPU sits behind its own PCIe switch under its socket's root complex. */
nvmlGpuTopologyLevel_t fcn_topology_level(const fc_gpu *a, const fc_gpu *b)
{
    return a == b                       ? NVML_TOPOLOGY_INTERNAL
         : a->numa_node == b->numa_node ? NVML_TOPOLOGY_NODE
                                        : NVML_TOPOLOGY_SYSTEM;
}

NVML_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                          nvmlGpuTopologyLevel_t *pathInfo)
{
    const fc_gpu *a, *b;
    nvmlReturn_t r = fcn_device(device1, &a);
    if (r) return r;
    if ((r = fcn_device(device2, &b))) return r;
    if (!pathInfo) return NVML_ERROR_INVALID_ARGUMENT;
    *pathInfo = fcn_topology_level(a, b);
    return NVML_SUCCESS;
}

/* ---- field values ------------------------------------------------------------------------------- */

static void set_uint(nvmlFieldValue_t *v, unsigned x)
{
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v->value.ullVal = 0;
    v->value.uiVal = x;
    v->nvmlReturn = NVML_SUCCESS;
}

/* Answer one per-link field for `link`. */
static void link_field(const fc_gpu *g, nvmlFieldValue_t *v, unsigned link)
{
    int n = links_present(g);
    if (n == 0) {
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        return;
    }
    if (link >= (unsigned)n) {
        v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
        return;
    }
    int up = link_active(g, link);
    switch (v->fieldId) {
    case NVML_FI_DEV_NVLINK_GET_STATE:
        set_uint(v, up ? NVML_NVLINK_STATE_ACTIVE : NVML_NVLINK_STATE_INACTIVE);
        break;
    case NVML_FI_DEV_NVLINK_GET_VERSION:
        if (link_version_code(g) == NVML_NVLINK_VERSION_INVALID) v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        else set_uint(v, link_version_code(g));
        break;
    default: /* speeds */
        set_uint(v, up ? link_speed_mbps(g) : 0);
        break;
    }
}

NVML_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                               nvmlFieldValue_t *values)
{
    const fc_gpu *g;
    nvmlReturn_t r = fcn_device(device, &g);
    if (r) return r;
    if (!values || valuesCount <= 0) return NVML_ERROR_INVALID_ARGUMENT;
    const fc_platform *p = fcn_platform();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long now_us = (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = now_us;
        v->latencyUsec = 0;
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        unsigned f = v->fieldId;
        if (f >= NVML_FI_DEV_NVLINK_SPEED_MBPS_L0 && f <= NVML_FI_DEV_NVLINK_SPEED_MBPS_L5) {
            link_field(g, v, f - NVML_FI_DEV_NVLINK_SPEED_MBPS_L0);
        } else if (f >= NVML_FI_DEV_NVLINK_SPEED_MBPS_L6 && f <= NVML_FI_DEV_NVLINK_SPEED_MBPS_L11) {
            link_field(g, v, 6 + f - NVML_FI_DEV_NVLINK_SPEED_MBPS_L6);
        } else if (f == NVML_FI_DEV_NVLINK_GET_SPEED || f == NVML_FI_DEV_NVLINK_GET_STATE ||
                   f == NVML_FI_DEV_NVLINK_GET_VERSION) {
            link_field(g, v, v->scopeId);
        } else if (f == NVML_FI_DEV_NVLINK_LINK_COUNT) {
            set_uint(v, (unsigned)links_present(g));
        } else if (f == NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON) {
            if (links_present(g) == 0) v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            else set_uint(v, g->nvlinks > 0 ? link_speed_mbps(g) : 0);
        } else if (f == NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT) {
            unsigned n = 0;
            for (int l = 0; l < g->nvlinks; l++)
                if (fcn_gpu_at(p, &g->nvlink_remote[l]) < 0) n++;
            set_uint(v, n);
        } else if (f == NVML_FI_DEV_C2C_LINK_COUNT) {
            set_uint(v, 0); /* no Grace: no chip-to-chip links */
        }
    }
    return NVML_SUCCESS;
}

/* ---- fabric and platform (multi-node NVLink): not simulated ---------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo)
{
    nvmlReturn_t r = fcn_device(device, NULL);
    if (r) return r;
    if (!gpuFabricInfo) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo)
{
    nvmlReturn_t r = fcn_device(device, NULL);
    if (r) return r;
    if (!gpuFabricInfo) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, nvmlPlatformInfo_t *platformInfo)
{
    nvmlReturn_t r = fcn_device(device, NULL);
    if (r) return r;
    if (!platformInfo) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NOT_SUPPORTED;
}
