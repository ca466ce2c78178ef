/* NVML initialisation (reference counted), error strings, system queries. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "nvml_internal.h"

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;                   /* guarded by init_lock; read atomically */
static const fc_platform *the_platform; /* set once, before init_count first turns positive */
static struct nvmlDevice_st devices[FC_MAX_GPUS];

const fc_platform *fcn_platform(void)
{
    return __atomic_load_n(&init_count, __ATOMIC_ACQUIRE) > 0 ? the_platform : NULL;
}

nvmlReturn_t fcn_check_init(void)
{
    return __atomic_load_n(&init_count, __ATOMIC_ACQUIRE) > 0 ? NVML_SUCCESS
                                                               : NVML_ERROR_UNINITIALIZED;
}

nvmlDevice_t fcn_handle(unsigned i)
{
    return &devices[i];
}

nvmlReturn_t fcn_system_uint(unsigned int *out, unsigned v)
{
    nvmlReturn_t r = fcn_check_init();
    if (r) return r;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *out = v;
    return NVML_SUCCESS;
}

nvmlReturn_t fcn_device_uint(nvmlDevice_t device, unsigned int *out, unsigned v)
{
    nvmlReturn_t r = fcn_device(device, NULL);
    if (r) return r;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *out = v;
    return NVML_SUCCESS;
}

nvmlReturn_t fcn_device(nvmlDevice_t device, const fc_gpu **gpu)
{
    const fc_platform *p = fcn_platform();
    if (!p) return NVML_ERROR_UNINITIALIZED;
    uintptr_t d = (uintptr_t)device, base = (uintptr_t)devices;
    if (d < base || d >= base + (uintptr_t)p->ngpus * sizeof devices[0] ||
        (d - base) % sizeof devices[0] != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (device->magic != FCN_DEVICE_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu) *gpu = device->gpu;
    return NVML_SUCCESS;
}

nvmlReturn_t fcn_copy_string(char *dst, unsigned length, const char *src)
{
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(src);
    if ((size_t)length < n + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, n + 1);
    return NVML_SUCCESS;
}

int fcn_gpu_at(const fc_platform *p, const fc_pci_addr *a)
{
    for (int i = 0; i < p->ngpus; i++) {
        const fc_pci_addr *g = &p->gpu[i].pci;
        if (g->domain == a->domain && g->bus == a->bus && g->device == a->device &&
            g->function == a->function)
            return i;
    }
    return -1;
}

/* ---- init / shutdown ---------------------------------------------------------------------------- */

static nvmlReturn_t do_init(void)
{
    const fc_platform *p = fc_platform_get(); /* prints the reason itself when it fails */
    if (!p) return NVML_ERROR_UNKNOWN;
    pthread_mutex_lock(&init_lock);
    if (!the_platform) {
        for (int i = 0; i < p->ngpus; i++) {
            devices[i].index = (unsigned)i;
            devices[i].gpu = &p->gpu[i];
            devices[i].magic = FCN_DEVICE_MAGIC;
        }
        the_platform = p;
    }
    int count = init_count + 1;
    __atomic_store_n(&init_count, count, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&init_lock);
    FC_LOG(FC_LOG_DEBUG, "nvml: init (count %d), %d GPU(s)", count, p->ngpus);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
    return do_init();
}

NVML_API nvmlReturn_t nvmlInit(void)
{
    return do_init();
}

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags; /* no GPU can be missing or unattached here */
    return do_init();
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t r = NVML_SUCCESS;
    pthread_mutex_lock(&init_lock);
    if (init_count <= 0) r = NVML_ERROR_UNINITIALIZED;
    else __atomic_store_n(&init_count, init_count - 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&init_lock);
    return r;
}

NVML_API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
    case NVML_ERROR_OPERATING_SYSTEM: return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "vGPU ECC not supported";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "Reset type not supported";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    }
    return "Unknown Error";
}

/* ---- system queries ----------------------------------------------------------------------------- */

/* Linux driver that ships with each CUDA version (the platform names the CUDA
 * version the simulated driver supports; NVML reports the kernel driver). */
static const struct {
    int cuda;
    const char *driver;
} driver_for_cuda[] = {
    {11000, "450.36.06"}, {11010, "455.23.05"}, {11020, "460.27.04"}, {11030, "465.19.01"},
    {11040, "470.42.01"}, {11050, "495.29.05"}, {11060, "510.39.01"}, {11070, "515.43.04"},
    {11080, "520.61.05"}, {12000, "525.60.13"}, {12010, "530.30.02"}, {12020, "535.54.03"},
    {12030, "545.23.06"}, {12040, "550.54.14"}, {12050, "555.42.02"}, {12060, "560.28.03"},
    {12070, "565.57.01"}, {12080, "570.86.10"}, {12090, "575.51.03"}, {13000, "580.65.06"},
};

const char *fcn_driver_version(int cuda)
{
    const char *best = driver_for_cuda[0].driver;
    for (size_t i = 0; i < sizeof driver_for_cuda / sizeof driver_for_cuda[0]; i++)
        if (driver_for_cuda[i].cuda <= cuda) best = driver_for_cuda[i].driver;
    return best;
}

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    const fc_platform *p = fcn_platform();
    if (!p) return NVML_ERROR_UNINITIALIZED;
    return fcn_copy_string(version, length, fcn_driver_version(p->driver_version));
}

NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    const fc_platform *p = fcn_platform();
    if (!p) return NVML_ERROR_UNINITIALIZED;
    char buf[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
    snprintf(buf, sizeof buf, "%d.%s", p->driver_version / 1000,
             fcn_driver_version(p->driver_version));
    return fcn_copy_string(version, length, buf);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    const fc_platform *p = fcn_platform();
    if (!p) return NVML_ERROR_UNINITIALIZED;
    if (!cudaDriverVersion) return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = p->driver_version;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* Confidential compute: never on in the simulation. */
NVML_API nvmlReturn_t nvmlSystemGetConfComputeState(nvmlConfComputeSystemState_t *state)
{
    nvmlReturn_t r = fcn_check_init();
    if (r) return r;
    if (!state) return NVML_ERROR_INVALID_ARGUMENT;
    state->environment = NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE;
    state->ccFeature = NVML_CC_SYSTEM_FEATURE_DISABLED;
    state->devToolsMode = NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetConfComputeSettings(nvmlSystemConfComputeSettings_t *settings)
{
    nvmlReturn_t r = fcn_check_init();
    if (r) return r;
    if (!settings) return NVML_ERROR_INVALID_ARGUMENT;
    if (settings->version != nvmlSystemConfComputeSettings_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    settings->environment = NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE;
    settings->ccFeature = NVML_CC_SYSTEM_FEATURE_DISABLED;
    settings->devToolsMode = NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF;
    settings->multiGpuMode = NVML_CC_SYSTEM_MULTIGPU_NONE;
    return NVML_SUCCESS;
}
