/* The subset of NVML's public ABI that the fake libnvidia-ml.so.1 implements.
 *
 * Written for ncclsim from the documented ABI of NVIDIA's nvml.h (NVML API 12/13):
 * every enum value, constant, return code and struct layout here must equal
 * NVIDIA's, because unmodified programs (NCCL, PyTorch, pynvml) call this
 * library with their own copies of those definitions. Layouts are pinned by the
 * static assertions at the end of this file (x86-64/aarch64 LP64).
 */
#ifndef NCCLSIM_NVML_TYPES_H
#define NCCLSIM_NVML_TYPES_H

#include <stddef.h>

#define NVML_API_VERSION 13

/* Versioned-struct tag: size in the low 24 bits, version above. */
#define NVML_STRUCT_VERSION(data, ver) (unsigned int)(sizeof(nvml##data##_v##ver##_t) | ((ver) << 24U))

typedef struct nvmlDevice_st *nvmlDevice_t;

/* ---- return codes ---------------------------------------------------------------------------- */
typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

/* ---- buffer sizes and formats ------------------------------------------------------------------ */
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT "%04X:%02X:%02X.0"
#define NVML_DEVICE_PCI_BUS_ID_FMT "%08X:%02X:%02X.0"
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_PART_NUMBER_BUFFER_SIZE 80
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_SERIAL_BUFFER_SIZE 30
#define NVML_NVLINK_MAX_LINKS 36

#define NVML_INIT_FLAG_NO_GPUS (1 << 0)
#define NVML_INIT_FLAG_NO_ATTACH (1 << 1)
#define NVML_INIT_FLAG_FORCE_INIT (1 << 2)

/* ---- PCI ---------------------------------------------------------------------------------------- */
/* Current layout (nvmlDeviceGetPciInfo_v3, nvmlDeviceGetNvLinkRemotePciInfo_v2): 68 bytes. */
typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE]; /* "%04X:%02X:%02X.0" */
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;    /* (device id << 16) | vendor id */
    unsigned int pciSubSystemId; /* (subsystem device << 16) | subsystem vendor */
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]; /* "%08X:%02X:%02X.0" */
} nvmlPciInfo_t;

/* Layout of NVML <= 8 (API of nvmlDeviceGetPciInfo, _v2 and nvmlDeviceGetNvLinkRemotePciInfo):
 * 52 bytes; what those entry points write, so old callers (NCCL declares this layout) are safe.
 * Not part of nvml.h under this name. */
typedef struct ncclsim_nvmlPciInfoLegacy_st {
    char busId[16]; /* "%04X:%02X:%02X.0" */
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int reserved0, reserved1, reserved2, reserved3;
} ncclsim_nvmlPciInfoLegacy_t;

typedef struct {
    unsigned int version; /* nvmlPciInfoExt_v1 */
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int baseClass;
    unsigned int subClass;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfoExt_v1_t;
typedef nvmlPciInfoExt_v1_t nvmlPciInfoExt_t;
#define nvmlPciInfoExt_v1 NVML_STRUCT_VERSION(PciInfoExt, 1)

/* ---- memory ------------------------------------------------------------------------------------- */
typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version; /* nvmlMemory_v2 */
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

typedef struct nvmlBAR1Memory_st {
    unsigned long long bar1Total;
    unsigned long long bar1Free;
    unsigned long long bar1Used;
} nvmlBAR1Memory_t;

/* ---- enums -------------------------------------------------------------------------------------- */
typedef enum nvmlEnableState_enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 } nvmlEnableState_t;

typedef enum nvmlBrandType_enum {
    NVML_BRAND_UNKNOWN = 0,
    NVML_BRAND_QUADRO = 1,
    NVML_BRAND_TESLA = 2,
    NVML_BRAND_NVS = 3,
    NVML_BRAND_GRID = 4,
    NVML_BRAND_GEFORCE = 5,
    NVML_BRAND_TITAN = 6,
    NVML_BRAND_NVIDIA_VAPPS = 7,
    NVML_BRAND_NVIDIA_VPC = 8,
    NVML_BRAND_NVIDIA_VCS = 9,
    NVML_BRAND_NVIDIA_VWS = 10,
    NVML_BRAND_NVIDIA_CLOUD_GAMING = 11,
    NVML_BRAND_QUADRO_RTX = 12,
    NVML_BRAND_NVIDIA_RTX = 13,
    NVML_BRAND_NVIDIA = 14,
    NVML_BRAND_GEFORCE_RTX = 15,
    NVML_BRAND_TITAN_RTX = 16,
    NVML_BRAND_COUNT = 18
} nvmlBrandType_t;

typedef enum nvmlClockType_enum {
    NVML_CLOCK_GRAPHICS = 0,
    NVML_CLOCK_SM = 1,
    NVML_CLOCK_MEM = 2,
    NVML_CLOCK_VIDEO = 3,
    NVML_CLOCK_COUNT
} nvmlClockType_t;

typedef enum nvmlComputeMode_enum {
    NVML_COMPUTEMODE_DEFAULT = 0,
    NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1,
    NVML_COMPUTEMODE_PROHIBITED = 2,
    NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3,
    NVML_COMPUTEMODE_COUNT
} nvmlComputeMode_t;

typedef enum nvmlMemoryErrorType_enum {
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,
    NVML_MEMORY_ERROR_TYPE_COUNT
} nvmlMemoryErrorType_t;

typedef enum nvmlEccCounterType_enum {
    NVML_VOLATILE_ECC = 0,
    NVML_AGGREGATE_ECC = 1,
    NVML_ECC_COUNTER_TYPE_COUNT
} nvmlEccCounterType_t;

typedef enum nvmlMemoryLocation_enum {
    NVML_MEMORY_LOCATION_L1_CACHE = 0,
    NVML_MEMORY_LOCATION_L2_CACHE = 1,
    NVML_MEMORY_LOCATION_DRAM = 2,
    NVML_MEMORY_LOCATION_DEVICE_MEMORY = 2,
    NVML_MEMORY_LOCATION_REGISTER_FILE = 3,
    NVML_MEMORY_LOCATION_TEXTURE_MEMORY = 4,
    NVML_MEMORY_LOCATION_TEXTURE_SHM = 5,
    NVML_MEMORY_LOCATION_CBU = 6,
    NVML_MEMORY_LOCATION_SRAM = 7,
    NVML_MEMORY_LOCATION_COUNT
} nvmlMemoryLocation_t;

typedef unsigned int nvmlDeviceArchitecture_t;
#define NVML_DEVICE_ARCH_KEPLER 2
#define NVML_DEVICE_ARCH_MAXWELL 3
#define NVML_DEVICE_ARCH_PASCAL 4
#define NVML_DEVICE_ARCH_VOLTA 5
#define NVML_DEVICE_ARCH_TURING 6
#define NVML_DEVICE_ARCH_AMPERE 7
#define NVML_DEVICE_ARCH_ADA 8
#define NVML_DEVICE_ARCH_HOPPER 9
#define NVML_DEVICE_ARCH_BLACKWELL 10
#define NVML_DEVICE_ARCH_RUBIN 13
#define NVML_DEVICE_ARCH_UNKNOWN 0xffffffff

/* nvmlDeviceGetPcieLinkMaxSpeed answers one of these (the generation number, not MB/s). */
#define NVML_PCIE_LINK_MAX_SPEED_INVALID 0x00000000
#define NVML_PCIE_LINK_MAX_SPEED_2500MBPS 0x00000001
#define NVML_PCIE_LINK_MAX_SPEED_5000MBPS 0x00000002
#define NVML_PCIE_LINK_MAX_SPEED_8000MBPS 0x00000003
#define NVML_PCIE_LINK_MAX_SPEED_16000MBPS 0x00000004
#define NVML_PCIE_LINK_MAX_SPEED_32000MBPS 0x00000005
#define NVML_PCIE_LINK_MAX_SPEED_64000MBPS 0x00000006

typedef unsigned int nvmlAffinityScope_t;
#define NVML_AFFINITY_SCOPE_NODE 0
#define NVML_AFFINITY_SCOPE_SOCKET 1

/* ---- topology / P2P ----------------------------------------------------------------------------- */
typedef enum nvmlGpuLevel_enum {
    NVML_TOPOLOGY_INTERNAL = 0,
    NVML_TOPOLOGY_SINGLE = 10,
    NVML_TOPOLOGY_MULTIPLE = 20,
    NVML_TOPOLOGY_HOSTBRIDGE = 30,
    NVML_TOPOLOGY_NODE = 40,
    NVML_TOPOLOGY_SYSTEM = 50
} nvmlGpuTopologyLevel_t;

typedef enum nvmlGpuP2PStatus_enum {
    NVML_P2P_STATUS_OK = 0,
    NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED = 1,
    NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED,
    NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
    NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
    NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
    NVML_P2P_STATUS_NOT_SUPPORTED = 5,
    NVML_P2P_STATUS_UNKNOWN = 6
} nvmlGpuP2PStatus_t;

typedef enum nvmlGpuP2PCapsIndex_enum {
    NVML_P2P_CAPS_INDEX_READ = 0,
    NVML_P2P_CAPS_INDEX_WRITE = 1,
    NVML_P2P_CAPS_INDEX_NVLINK = 2,
    NVML_P2P_CAPS_INDEX_ATOMICS = 3,
    NVML_P2P_CAPS_INDEX_PCI = 4,
    NVML_P2P_CAPS_INDEX_PROP = NVML_P2P_CAPS_INDEX_PCI,
    NVML_P2P_CAPS_INDEX_UNKNOWN = 5
} nvmlGpuP2PCapsIndex_t;

/* ---- NVLink ------------------------------------------------------------------------------------- */
typedef enum nvmlNvLinkCapability_enum {
    NVML_NVLINK_CAP_P2P_SUPPORTED = 0,
    NVML_NVLINK_CAP_SYSMEM_ACCESS = 1,
    NVML_NVLINK_CAP_P2P_ATOMICS = 2,
    NVML_NVLINK_CAP_SYSMEM_ATOMICS = 3,
    NVML_NVLINK_CAP_SLI_BRIDGE = 4,
    NVML_NVLINK_CAP_VALID = 5,
    NVML_NVLINK_CAP_COUNT
} nvmlNvLinkCapability_t;

typedef enum nvmlIntNvLinkDeviceType_enum {
    NVML_NVLINK_DEVICE_TYPE_GPU = 0x00,
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01,
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02,
    NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
} nvmlIntNvLinkDeviceType_t;

typedef enum nvmlNvlinkVersion_enum {
    NVML_NVLINK_VERSION_INVALID = 0,
    NVML_NVLINK_VERSION_1_0 = 1,
    NVML_NVLINK_VERSION_2_0 = 2,
    NVML_NVLINK_VERSION_2_2 = 3,
    NVML_NVLINK_VERSION_3_0 = 4,
    NVML_NVLINK_VERSION_3_1 = 5,
    NVML_NVLINK_VERSION_4_0 = 6,
    NVML_NVLINK_VERSION_5_0 = 7,
    NVML_NVLINK_VERSION_6_0 = 8
} nvmlNvlinkVersion_t;

#define NVML_NVLINK_STATE_INACTIVE 0x0
#define NVML_NVLINK_STATE_ACTIVE 0x1
#define NVML_NVLINK_STATE_SLEEP 0x2

/* ---- field values ------------------------------------------------------------------------------- */
typedef enum nvmlValueType_enum {
    NVML_VALUE_TYPE_DOUBLE = 0,
    NVML_VALUE_TYPE_UNSIGNED_INT = 1,
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
    NVML_VALUE_TYPE_SIGNED_INT = 5,
    NVML_VALUE_TYPE_UNSIGNED_SHORT = 6,
    NVML_VALUE_TYPE_COUNT
} nvmlValueType_t;

typedef union nvmlValue_st {
    double dVal;
    int siVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct nvmlFieldValue_st {
    unsigned int fieldId;
    unsigned int scopeId; /* e.g. the link for per-link fields */
    long long timestamp;  /* microseconds since 1970 */
    long long latencyUsec;
    nvmlValueType_t valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

/* The field ids this library answers (ids never change in NVML). */
#define NVML_FI_DEV_NVLINK_SPEED_MBPS_L0 84 /* ..L5 = 89 */
#define NVML_FI_DEV_NVLINK_SPEED_MBPS_L5 89
#define NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON 90
#define NVML_FI_DEV_NVLINK_LINK_COUNT 91
#define NVML_FI_DEV_NVLINK_SPEED_MBPS_L6 132 /* ..L11 = 137 */
#define NVML_FI_DEV_NVLINK_SPEED_MBPS_L11 137
#define NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID 146
#define NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT 147
#define NVML_FI_DEV_NVLINK_GET_SPEED 164
#define NVML_FI_DEV_NVLINK_GET_STATE 165
#define NVML_FI_DEV_NVLINK_GET_VERSION 166
#define NVML_FI_DEV_C2C_LINK_COUNT 170
#define NVML_FI_DEV_C2C_LINK_GET_STATUS 171
#define NVML_FI_DEV_C2C_LINK_GET_MAX_BW 172

/* ---- GPU fabric (multi-node NVLink) -------------------------------------------------------------- */
#define NVML_GPU_FABRIC_UUID_LEN 16
#define NVML_GPU_FABRIC_STATE_NOT_SUPPORTED 0
#define NVML_GPU_FABRIC_STATE_NOT_STARTED 1
#define NVML_GPU_FABRIC_STATE_IN_PROGRESS 2
#define NVML_GPU_FABRIC_STATE_COMPLETED 3
typedef unsigned char nvmlGpuFabricState_t;

typedef struct {
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;
#define nvmlGpuFabricInfo_v2 NVML_STRUCT_VERSION(GpuFabricInfo, 2)

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;
typedef nvmlGpuFabricInfo_v3_t nvmlGpuFabricInfoV_t;
#define nvmlGpuFabricInfo_v3 NVML_STRUCT_VERSION(GpuFabricInfo, 3)

typedef struct {
    unsigned int version;
    unsigned char ibGuid[16];
    unsigned char chassisSerialNumber[16];
    unsigned char slotNumber;
    unsigned char trayIndex;
    unsigned char hostId;
    unsigned char peerType;
    unsigned char moduleId;
} nvmlPlatformInfo_v2_t;
typedef nvmlPlatformInfo_v2_t nvmlPlatformInfo_t;

/* ---- confidential compute ------------------------------------------------------------------------ */
#define NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF 0
#define NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE 0
#define NVML_CC_SYSTEM_FEATURE_DISABLED 0
#define NVML_CC_SYSTEM_FEATURE_ENABLED 1
#define NVML_CC_SYSTEM_MULTIGPU_NONE 0
#define NVML_CC_SYSTEM_MULTIGPU_PROTECTED_PCIE 1
#define NVML_CC_SYSTEM_MULTIGPU_NVLE 2

typedef struct nvmlConfComputeSystemState_st {
    unsigned int environment;
    unsigned int ccFeature;
    unsigned int devToolsMode;
} nvmlConfComputeSystemState_t;

typedef struct {
    unsigned int version;
    unsigned int environment;
    unsigned int ccFeature;
    unsigned int devToolsMode;
    unsigned int multiGpuMode;
} nvmlSystemConfComputeSettings_v1_t;
typedef nvmlSystemConfComputeSettings_v1_t nvmlSystemConfComputeSettings_t;
#define nvmlSystemConfComputeSettings_v1 NVML_STRUCT_VERSION(SystemConfComputeSettings, 1)

typedef struct nvmlConfComputeMemSizeInfo_st {
    unsigned long long protectedMemSizeKib;
    unsigned long long unprotectedMemSizeKib;
} nvmlConfComputeMemSizeInfo_t;

/* ---- monitoring: utilisation, temperature, power, clocks, ECC ----------------------------------- */
typedef struct nvmlUtilization_st {
    unsigned int gpu;    /* % of the sample period a kernel ran */
    unsigned int memory; /* % of the sample period device memory was read or written */
} nvmlUtilization_t;

typedef enum nvmlTemperatureSensors_enum { NVML_TEMPERATURE_GPU = 0, NVML_TEMPERATURE_COUNT } nvmlTemperatureSensors_t;

typedef struct {
    unsigned int version; /* nvmlTemperature_v1 */
    nvmlTemperatureSensors_t sensorType;
    int temperature;
} nvmlTemperature_v1_t;
typedef nvmlTemperature_v1_t nvmlTemperature_t;
#define nvmlTemperature_v1 NVML_STRUCT_VERSION(Temperature, 1)

typedef enum nvmlTemperatureThresholds_enum {
    NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0,
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1,
    NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2,
    NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3,
    NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN = 4,
    NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR = 5,
    NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX = 6,
    NVML_TEMPERATURE_THRESHOLD_GPS_CURR = 7,
    NVML_TEMPERATURE_THRESHOLD_COUNT
} nvmlTemperatureThresholds_t;

typedef enum nvmlPStates_enum {
    NVML_PSTATE_0 = 0,
    NVML_PSTATE_15 = 15,
    NVML_PSTATE_UNKNOWN = 32
} nvmlPstates_t;

typedef enum nvmlClockId_enum {
    NVML_CLOCK_ID_CURRENT = 0,
    NVML_CLOCK_ID_APP_CLOCK_TARGET = 1,
    NVML_CLOCK_ID_APP_CLOCK_DEFAULT = 2,
    NVML_CLOCK_ID_CUSTOMER_BOOST_MAX = 3,
    NVML_CLOCK_ID_COUNT
} nvmlClockId_t;

/* Clock event ("throttle") reasons: a bit mask. */
#define nvmlClocksEventReasonGpuIdle 0x1ull
#define nvmlClocksEventReasonAll 0x1ffull /* the nine reasons bits 0..8 name */

typedef enum nvmlPcieUtilCounter_enum {
    NVML_PCIE_UTIL_TX_BYTES = 0,
    NVML_PCIE_UTIL_RX_BYTES = 1,
    NVML_PCIE_UTIL_COUNT
} nvmlPcieUtilCounter_t;

typedef unsigned int nvmlBusType_t;
#define NVML_BUS_TYPE_PCIE 2

typedef enum nvmlGpuVirtualizationMode { NVML_GPU_VIRTUALIZATION_MODE_NONE = 0 } nvmlGpuVirtualizationMode_t;

typedef enum nvmlPerfPolicyType_enum {
    NVML_PERF_POLICY_POWER = 0,
    NVML_PERF_POLICY_THERMAL = 1,
    NVML_PERF_POLICY_SYNC_BOOST = 2,
    NVML_PERF_POLICY_BOARD_LIMIT = 3,
    NVML_PERF_POLICY_LOW_UTILIZATION = 4,
    NVML_PERF_POLICY_RELIABILITY = 5,
    NVML_PERF_POLICY_TOTAL_APP_CLOCKS = 10,
    NVML_PERF_POLICY_TOTAL_BASE_CLOCKS = 11,
    NVML_PERF_POLICY_COUNT
} nvmlPerfPolicyType_t;

typedef struct nvmlViolationTime_st {
    unsigned long long referenceTime; /* CPU time stamp, microseconds */
    unsigned long long violationTime; /* nanoseconds */
} nvmlViolationTime_t;

typedef struct nvmlEccErrorCounts_st {
    unsigned long long l1Cache;
    unsigned long long l2Cache;
    unsigned long long deviceMemory;
    unsigned long long registerFile;
} nvmlEccErrorCounts_t;

typedef enum nvmlPageRetirementCause_enum {
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0,
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1,
    NVML_PAGE_RETIREMENT_CAUSE_COUNT
} nvmlPageRetirementCause_t;

typedef enum nvmlNvLinkErrorCounter_enum {
    NVML_NVLINK_ERROR_DL_REPLAY = 0,
    NVML_NVLINK_ERROR_DL_RECOVERY = 1,
    NVML_NVLINK_ERROR_DL_CRC_FLIT = 2,
    NVML_NVLINK_ERROR_DL_CRC_DATA = 3,
    NVML_NVLINK_ERROR_DL_ECC_DATA = 4,
    NVML_NVLINK_ERROR_COUNT
} nvmlNvLinkErrorCounter_t;

#define NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE 32
#define NVML_GSP_FIRMWARE_VERSION_BUF_SIZE 0x40
#define NVML_DEVICE_MIG_DISABLE 0x0

/* ---- processes ---------------------------------------------------------------------------------- */
typedef struct nvmlProcessInfo_v1_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

/* _v2 and _v3 entry points share this layout. */
typedef struct nvmlProcessInfo_v2_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;     /* 0xFFFFFFFF without MIG */
    unsigned int computeInstanceId; /* 0xFFFFFFFF without MIG */
} nvmlProcessInfo_v2_t, nvmlProcessInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessDetail_v1_t;

typedef struct {
    unsigned int version; /* nvmlProcessDetailList_v1 */
    unsigned int mode;    /* NVML_PROCESS_MODE_* */
    unsigned int numProcArrayEntries;
    nvmlProcessDetail_v1_t *procArray;
} nvmlProcessDetailList_v1_t;
typedef nvmlProcessDetailList_v1_t nvmlProcessDetailList_t;
#define nvmlProcessDetailList_v1 NVML_STRUCT_VERSION(ProcessDetailList, 1)
#define NCCLSIM_NVML_PROCESS_MODE_MAX 2 /* modes: compute 0, graphics 1, MPS compute 2 (unnamed in nvml.h) */

typedef struct nvmlProcessUtilizationSample_st {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct {
    unsigned long long timeStamp;
    unsigned int pid;
    unsigned int smUtil, memUtil, encUtil, decUtil, jpgUtil, ofaUtil;
} nvmlProcessUtilizationInfo_v1_t;

typedef struct {
    unsigned int version; /* nvmlProcessesUtilizationInfo_v1 */
    unsigned int processSamplesCount;
    unsigned long long lastSeenTimeStamp;
    nvmlProcessUtilizationInfo_v1_t *procUtilArray;
} nvmlProcessesUtilizationInfo_v1_t;
typedef nvmlProcessesUtilizationInfo_v1_t nvmlProcessesUtilizationInfo_t;
#define nvmlProcessesUtilizationInfo_v1 NVML_STRUCT_VERSION(ProcessesUtilizationInfo, 1)

/* ---- handles by UUID, excluded devices, units, system ------------------------------------------- */
#define NVML_DEVICE_UUID_ASCII_LEN 41
#define NVML_DEVICE_UUID_BINARY_LEN 16
#define NVML_UUID_TYPE_ASCII 1
#define NVML_UUID_TYPE_BINARY 2
typedef struct {
    unsigned int version; /* nvmlUUID_v1 */
    unsigned int type;    /* NVML_UUID_TYPE_* */
    union {
        char str[NVML_DEVICE_UUID_ASCII_LEN];
        unsigned char bytes[NVML_DEVICE_UUID_BINARY_LEN];
    } value;
} nvmlUUID_v1_t;
typedef nvmlUUID_v1_t nvmlUUID_t;
#define nvmlUUID_v1 NVML_STRUCT_VERSION(UUID, 1)

typedef struct nvmlExcludedDeviceInfo_st {
    nvmlPciInfo_t pciInfo;
    char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
} nvmlExcludedDeviceInfo_t;

typedef struct nvmlUnit_st *nvmlUnit_t;

typedef struct nvmlHwbcEntry_st {
    unsigned int hwbcId;
    char firmwareVersion[32];
} nvmlHwbcEntry_t;

typedef struct {
    unsigned int version; /* nvmlSystemDriverBranchInfo_v1 */
    char branch[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
} nvmlSystemDriverBranchInfo_v1_t;
typedef nvmlSystemDriverBranchInfo_v1_t nvmlSystemDriverBranchInfo_t;
#define nvmlSystemDriverBranchInfo_v1 NVML_STRUCT_VERSION(SystemDriverBranchInfo, 1)

typedef struct nvmlConfComputeSystemCaps_st {
    unsigned int cpuCaps;  /* NVML_CC_SYSTEM_CPU_CAPS_NONE = 0 */
    unsigned int gpusCaps; /* NVML_CC_SYSTEM_GPUS_CC_NOT_CAPABLE = 0 */
} nvmlConfComputeSystemCaps_t;

typedef struct {
    unsigned int version; /* NVML_GPM_SUPPORT_VERSION */
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;
#define NVML_GPM_SUPPORT_VERSION 1

/* ---- layout checks (values of NVIDIA's nvml.h on LP64) ------------------------------------------- */
_Static_assert(sizeof(nvmlReturn_t) == 4, "enum size");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t");
_Static_assert(offsetof(nvmlPciInfo_t, domain) == 16, "nvmlPciInfo_t.domain");
_Static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "nvmlPciInfo_t.busId");
_Static_assert(sizeof(ncclsim_nvmlPciInfoLegacy_t) == 52, "legacy nvmlPciInfo_t");
_Static_assert(sizeof(nvmlPciInfoExt_v1_t) == 64, "nvmlPciInfoExt_v1_t");
_Static_assert(nvmlPciInfoExt_v1 == 0x01000040u, "nvmlPciInfoExt_v1");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40 && offsetof(nvmlMemory_v2_t, total) == 8, "nvmlMemory_v2_t");
_Static_assert(nvmlMemory_v2 == 0x02000028u, "nvmlMemory_v2");
_Static_assert(sizeof(nvmlValue_t) == 8, "nvmlValue_t");
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t");
_Static_assert(offsetof(nvmlFieldValue_t, timestamp) == 8, "nvmlFieldValue_t.timestamp");
_Static_assert(offsetof(nvmlFieldValue_t, valueType) == 24, "nvmlFieldValue_t.valueType");
_Static_assert(offsetof(nvmlFieldValue_t, nvmlReturn) == 28, "nvmlFieldValue_t.nvmlReturn");
_Static_assert(offsetof(nvmlFieldValue_t, value) == 32, "nvmlFieldValue_t.value");
_Static_assert(sizeof(nvmlGpuFabricInfo_t) == 28, "nvmlGpuFabricInfo_t");
_Static_assert(sizeof(nvmlGpuFabricInfo_v2_t) == 36, "nvmlGpuFabricInfo_v2_t");
_Static_assert(sizeof(nvmlGpuFabricInfo_v3_t) == 40, "nvmlGpuFabricInfo_v3_t");
_Static_assert(sizeof(nvmlConfComputeSystemState_t) == 12, "nvmlConfComputeSystemState_t");
_Static_assert(sizeof(nvmlSystemConfComputeSettings_v1_t) == 20, "nvmlSystemConfComputeSettings_v1_t");
_Static_assert(nvmlSystemConfComputeSettings_v1 == 0x01000014u, "nvmlSystemConfComputeSettings_v1");
_Static_assert(sizeof(nvmlConfComputeMemSizeInfo_t) == 16, "nvmlConfComputeMemSizeInfo_t");
_Static_assert(sizeof(nvmlBAR1Memory_t) == 24, "nvmlBAR1Memory_t");

_Static_assert(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t");
_Static_assert(sizeof(nvmlTemperature_v1_t) == 12 && nvmlTemperature_v1 == 0x0100000cu, "nvmlTemperature_v1_t");
_Static_assert(sizeof(nvmlViolationTime_t) == 16, "nvmlViolationTime_t");
_Static_assert(sizeof(nvmlEccErrorCounts_t) == 32, "nvmlEccErrorCounts_t");
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t");
_Static_assert(sizeof(nvmlProcessInfo_v2_t) == 24, "nvmlProcessInfo_v2_t");
_Static_assert(sizeof(nvmlProcessDetail_v1_t) == 32, "nvmlProcessDetail_v1_t");
_Static_assert(sizeof(nvmlProcessDetailList_v1_t) == 24, "nvmlProcessDetailList_v1_t");
_Static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32, "nvmlProcessUtilizationSample_t");
_Static_assert(sizeof(nvmlProcessesUtilizationInfo_v1_t) == 24, "nvmlProcessesUtilizationInfo_v1_t");
_Static_assert(sizeof(nvmlUUID_v1_t) == 52 && offsetof(nvmlUUID_v1_t, value) == 8, "nvmlUUID_v1_t");
_Static_assert(sizeof(nvmlExcludedDeviceInfo_t) == 148, "nvmlExcludedDeviceInfo_t");
_Static_assert(sizeof(nvmlSystemDriverBranchInfo_v1_t) == 84, "nvmlSystemDriverBranchInfo_v1_t");
_Static_assert(sizeof(nvmlHwbcEntry_t) == 36, "nvmlHwbcEntry_t");

#endif
