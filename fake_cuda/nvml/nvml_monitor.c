/* NVML monitoring queries: utilisation, temperature, power and energy, clocks
 * and performance state, ECC, encoder/decoder, display.
 *
 * The simulation runs no kernels and models no thermals or power draw, so these
 * answer an idle GPU: the values below marked "assumed" are plausible readings
 * of an idle data-centre board, not measurements; everything else comes from
 * the platform (fake_cuda/common/platform.h) and the GPU model's data
 * (ncclsim/platform/gpu_models.json). */
#include <cuda.h>
#include <string.h>
#include <time.h>

#include "nvml_internal.h"

/* Assumed: an idle HGX H100 in an air-cooled chassis reads 30-35 C. */
#define FCN_IDLE_TEMP_C 32
/* Thermal limits nvidia-smi -q shows on an HGX H100 (shutdown, slowdown, GPU
 * max operating, memory max operating); used for every model (assumed). */
#define FCN_TEMP_SHUTDOWN_C 92
#define FCN_TEMP_SLOWDOWN_C 89
#define FCN_TEMP_GPU_MAX_C 87
#define FCN_TEMP_MEM_MAX_C 95
/* Assumed: an idle board draws about a tenth of its power limit (~70 W of an
 * H100 SXM's 700 W), and its limit can be lowered to a quarter. */
#define FCN_IDLE_POWER_DIVISOR 10
#define FCN_MIN_POWER_DIVISOR 4
/* Assumed sampling period of the encoder/decoder/JPEG/OFA utilisation. */
#define FCN_ENGINE_SAMPLE_US 1000000u

/* A model's CUDA device attribute, or `fallback` when its data does not give it. */
static int model_attr(const fc_gpu *gpu, int attr, int fallback)
{
    return gpu->model->has[attr] ? gpu->model->attr[attr] : fallback;
}

static int ecc_enabled(const fc_gpu *gpu)
{
    return model_attr(gpu, CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1);
}

/* ---- utilisation ------------------------------------------------------------------------------ */

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    VALID_DEVICE_OR_RETURN(device);
    if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = 0; /* no kernel runs on the GPU itself: the host replays them */
    utilization->memory = 0;
    return NVML_SUCCESS;
}

/* Encoder, decoder, JPEG and OFA engines: idle. */
static nvmlReturn_t engine_idle(nvmlDevice_t device, unsigned int *utilization, unsigned int *samplingPeriodUs)
{
    VALID_DEVICE_OR_RETURN(device);
    if (!utilization || !samplingPeriodUs) return NVML_ERROR_INVALID_ARGUMENT;
    *utilization = 0;
    *samplingPeriodUs = FCN_ENGINE_SAMPLE_US;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                      unsigned int *samplingPeriodUs)
{
    return engine_idle(device, utilization, samplingPeriodUs);
}

NVML_API nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                      unsigned int *samplingPeriodUs)
{
    return engine_idle(device, utilization, samplingPeriodUs);
}

NVML_API nvmlReturn_t nvmlDeviceGetJpgUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                  unsigned int *samplingPeriodUs)
{
    return engine_idle(device, utilization, samplingPeriodUs);
}

NVML_API nvmlReturn_t nvmlDeviceGetOfaUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                  unsigned int *samplingPeriodUs)
{
    return engine_idle(device, utilization, samplingPeriodUs);
}

NVML_API nvmlReturn_t nvmlDeviceGetEncoderStats(nvmlDevice_t device, unsigned int *sessionCount,
                                                unsigned int *averageFps, unsigned int *averageLatency)
{
    VALID_DEVICE_OR_RETURN(device);
    if (!sessionCount || !averageFps || !averageLatency) return NVML_ERROR_INVALID_ARGUMENT;
    *sessionCount = *averageFps = *averageLatency = 0;
    return NVML_SUCCESS;
}

/* No encoder or frame-buffer-capture sessions: the count protocol with none. */
static nvmlReturn_t no_sessions(nvmlDevice_t device, unsigned int *sessionCount)
{
    return fcn_device_uint(device, sessionCount, 0);
}

NVML_API nvmlReturn_t nvmlDeviceGetEncoderSessions(nvmlDevice_t device, unsigned int *sessionCount,
                                                   void *sessionInfos)
{
    (void)sessionInfos;
    return no_sessions(device, sessionCount);
}

NVML_API nvmlReturn_t nvmlDeviceGetFBCSessions(nvmlDevice_t device, unsigned int *sessionCount,
                                               void *sessionInfo)
{
    (void)sessionInfo;
    return no_sessions(device, sessionCount);
}

NVML_API nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter,
                                                  unsigned int *value)
{
    VALID_DEVICE_OR_RETURN(device);
    if (!value || (unsigned)counter >= NVML_PCIE_UTIL_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    *value = 0; /* KB/s: the simulation's copies do not cross a PCIe bus */
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    return fcn_device_uint(device, value, 0);
}

/* ---- display: data-centre boards drive none ------------------------------------------------------ */

NVML_API nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *isActive)
{
    return fcn_device_uint(device, (unsigned int *)isActive, NVML_FEATURE_DISABLED);
}

NVML_API nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display)
{
    return fcn_device_uint(device, (unsigned int *)display, NVML_FEATURE_DISABLED);
}

/* ---- temperature ------------------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                               unsigned int *temp)
{
    VALID_DEVICE_OR_RETURN(device);
    if (!temp || sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = FCN_IDLE_TEMP_C;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
    VALID_DEVICE_OR_RETURN(device);
    if (!temperature) return NVML_ERROR_INVALID_ARGUMENT;
    if (temperature->version != nvmlTemperature_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (temperature->sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    temperature->temperature = FCN_IDLE_TEMP_C;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device,
                                                        nvmlTemperatureThresholds_t thresholdType,
                                                        unsigned int *temp)
{
    VALID_DEVICE_OR_RETURN(device);
    if (!temp || (unsigned)thresholdType >= NVML_TEMPERATURE_THRESHOLD_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    switch (thresholdType) {
    case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: *temp = FCN_TEMP_SHUTDOWN_C; break;
    case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: *temp = FCN_TEMP_SLOWDOWN_C; break;
    case NVML_TEMPERATURE_THRESHOLD_MEM_MAX: *temp = FCN_TEMP_MEM_MAX_C; break;
    case NVML_TEMPERATURE_THRESHOLD_GPU_MAX: *temp = FCN_TEMP_GPU_MAX_C; break;
    default: return NVML_ERROR_NOT_SUPPORTED; /* acoustic/GPS targets: GeForce/workstation only */
    }
    return NVML_SUCCESS;
}

/* ---- power and energy -------------------------------------------------------------------------- */

static unsigned idle_power_mw(const fc_gpu *gpu)
{
    return gpu->model->power_limit_w * 1000u / FCN_IDLE_POWER_DIVISOR;
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!power) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->model->power_limit_w) return NVML_ERROR_NOT_SUPPORTED;
    *power = idle_power_mw(gpu);
    return NVML_SUCCESS;
}

/* Millijoules since the driver loaded (taken as boot), at the idle draw. */
NVML_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!energy) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->model->power_limit_w) return NVML_ERROR_NOT_SUPPORTED;
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    unsigned long long ms = (unsigned long long)ts.tv_sec * 1000ull + (unsigned long long)ts.tv_nsec / 1000000ull;
    *energy = ms * idle_power_mw(gpu) / 1000ull;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                                   unsigned int *maxLimit)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!minLimit || !maxLimit) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpu->model->power_limit_w) return NVML_ERROR_NOT_SUPPORTED;
    *maxLimit = gpu->model->power_limit_w * 1000u;
    *minLimit = *maxLimit / FCN_MIN_POWER_DIVISOR;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = gpu->model->power_limit_w ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* ---- performance state and clocks ---------------------------------------------------------------- */

/* P0: the simulated GPU holds its maximum clocks (as nvmlDeviceGetClockInfo says). */
static nvmlReturn_t pstate(nvmlDevice_t device, nvmlPstates_t *pState)
{
    return fcn_device_uint(device, (unsigned int *)pState, NVML_PSTATE_0);
}

NVML_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    return pstate(device, pState);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    return pstate(device, pState);
}

/* `size` is in bytes; unused entries are NVML_PSTATE_UNKNOWN. */
NVML_API nvmlReturn_t nvmlDeviceGetSupportedPerformanceStates(nvmlDevice_t device, nvmlPstates_t *pstates,
                                                              unsigned int size)
{
    VALID_DEVICE_OR_RETURN(device);
    if (!pstates) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = size / sizeof *pstates;
    if (n < 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    pstates[0] = NVML_PSTATE_0;
    for (unsigned i = 1; i < n; i++) pstates[i] = NVML_PSTATE_UNKNOWN;
    return NVML_SUCCESS;
}

/* Idle (nothing runs) while the clocks stay at their maximum. */
static nvmlReturn_t event_reasons(nvmlDevice_t device, unsigned long long *reasons, unsigned long long value)
{
    VALID_DEVICE_OR_RETURN(device);
    if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = value;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return event_reasons(device, reasons, nvmlClocksEventReasonGpuIdle);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return event_reasons(device, reasons, nvmlClocksEventReasonGpuIdle);
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return event_reasons(device, reasons, nvmlClocksEventReasonAll);
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return event_reasons(device, reasons, nvmlClocksEventReasonAll);
}

/* Current, application (target and default) and boost clocks are all the
 * model's maximum: nothing lowers them in the simulation. */
NVML_API nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType, nvmlClockId_t clockId,
                                         unsigned int *clockMHz)
{
    nvmlReturn_t r = fcn_device(device, NULL);
    if (r) return r;
    if ((unsigned)clockId >= NVML_CLOCK_ID_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    return fcn_max_clock(device, clockType, clockMHz);
}

NVML_API nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                     unsigned int *clockMHz)
{
    return fcn_max_clock(device, clockType, clockMHz);
}

NVML_API nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                            unsigned int *clockMHz)
{
    return fcn_max_clock(device, clockType, clockMHz);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxCustomerBoostClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                         unsigned int *clockMHz)
{
    return fcn_max_clock(device, clockType, clockMHz);
}

/* One clock in a caller's array of *count: NVML's count protocol. */
static nvmlReturn_t one_clock(unsigned int *count, unsigned int *clocksMHz, unsigned clock)
{
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (*count < 1) {
        *count = 1;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (!clocksMHz) return NVML_ERROR_INVALID_ARGUMENT;
    clocksMHz[0] = clock;
    *count = 1;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count,
                                                         unsigned int *clocksMHz)
{
    unsigned mem;
    nvmlReturn_t r = fcn_max_clock(device, NVML_CLOCK_MEM, &mem);
    return r ? r : one_clock(count, clocksMHz, mem);
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned int memoryClockMHz,
                                                           unsigned int *count, unsigned int *clocksMHz)
{
    unsigned mem, graphics;
    nvmlReturn_t r = fcn_max_clock(device, NVML_CLOCK_MEM, &mem);
    if (r || (r = fcn_max_clock(device, NVML_CLOCK_GRAPHICS, &graphics))) return r;
    if (memoryClockMHz != mem) return NVML_ERROR_NOT_FOUND;
    return one_clock(count, clocksMHz, graphics);
}

NVML_API nvmlReturn_t nvmlDeviceGetMinMaxClockOfPState(nvmlDevice_t device, nvmlClockType_t type,
                                                       nvmlPstates_t pstate, unsigned int *minClockMHz,
                                                       unsigned int *maxClockMHz)
{
    unsigned clock;
    nvmlReturn_t r = fcn_max_clock(device, type, &clock);
    if (r) return r;
    if (!minClockMHz || !maxClockMHz) return NVML_ERROR_INVALID_ARGUMENT;
    if (pstate != NVML_PSTATE_0) return NVML_ERROR_NOT_SUPPORTED; /* the only state it has */
    *minClockMHz = *maxClockMHz = clock;
    return NVML_SUCCESS;
}

/* No limiter ever held the clocks down. */
NVML_API nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t device, nvmlPerfPolicyType_t perfPolicyType,
                                                   nvmlViolationTime_t *violTime)
{
    VALID_DEVICE_OR_RETURN(device);
    unsigned p = (unsigned)perfPolicyType;
    if (!violTime || (p > NVML_PERF_POLICY_RELIABILITY && p != NVML_PERF_POLICY_TOTAL_APP_CLOCKS &&
                      p != NVML_PERF_POLICY_TOTAL_BASE_CLOCKS))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    violTime->referenceTime = (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000ull;
    violTime->violationTime = 0;
    return NVML_SUCCESS;
}

/* ---- ECC: enabled as the model says, and never an error ------------------------------------------- */

static nvmlReturn_t ecc_mode(nvmlDevice_t device, nvmlEnableState_t *a, nvmlEnableState_t *b, int two)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!a || (two && !b)) return NVML_ERROR_INVALID_ARGUMENT;
    *a = ecc_enabled(gpu) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    if (two) *b = *a; /* nothing pending */
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
                                           nvmlEnableState_t *pending)
{
    return ecc_mode(device, current, pending, 1);
}

NVML_API nvmlReturn_t nvmlDeviceGetDefaultEccMode(nvmlDevice_t device, nvmlEnableState_t *defaultMode)
{
    return ecc_mode(device, defaultMode, NULL, 0);
}

/* Validate an ECC query: NOT_SUPPORTED while ECC is off, as real NVML. */
static nvmlReturn_t ecc_query(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                              nvmlEccCounterType_t counterType, const void *out)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!out || (unsigned)errorType >= NVML_MEMORY_ERROR_TYPE_COUNT ||
        (unsigned)counterType >= NVML_ECC_COUNTER_TYPE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    return ecc_enabled(gpu) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                  nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
    nvmlReturn_t r = ecc_query(device, errorType, counterType, eccCounts);
    if (r) return r;
    *eccCounts = 0;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetDetailedEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                     nvmlEccCounterType_t counterType,
                                                     nvmlEccErrorCounts_t *eccCounts)
{
    nvmlReturn_t r = ecc_query(device, errorType, counterType, eccCounts);
    if (r) return r;
    memset(eccCounts, 0, sizeof *eccCounts);
    return NVML_SUCCESS;
}

/* Ampere and later remap rows; older GPUs retire pages (none, here). */
static int remaps_rows(const fc_gpu *gpu)
{
    return gpu->model->sm >= 80;
}

NVML_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                                unsigned int *isPending, unsigned int *failureOccurred)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!corrRows || !uncRows || !isPending || !failureOccurred) return NVML_ERROR_INVALID_ARGUMENT;
    if (!remaps_rows(gpu)) return NVML_ERROR_NOT_SUPPORTED;
    *corrRows = *uncRows = *isPending = *failureOccurred = 0;
    return NVML_SUCCESS;
}

static nvmlReturn_t retired_pages(nvmlDevice_t device, nvmlPageRetirementCause_t cause, unsigned int *pageCount)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!pageCount || (unsigned)cause >= NVML_PAGE_RETIREMENT_CAUSE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    if (remaps_rows(gpu)) return NVML_ERROR_NOT_SUPPORTED;
    *pageCount = 0;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                                unsigned int *pageCount, unsigned long long *addresses)
{
    (void)addresses;
    return retired_pages(device, cause, pageCount);
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                                   unsigned int *pageCount, unsigned long long *addresses,
                                                   unsigned long long *timestamps)
{
    (void)addresses;
    (void)timestamps;
    return retired_pages(device, cause, pageCount);
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
    DEVICE_OR_RETURN(device, gpu);
    if (!isPending) return NVML_ERROR_INVALID_ARGUMENT;
    if (remaps_rows(gpu)) return NVML_ERROR_NOT_SUPPORTED;
    *isPending = NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}
