/* The simulated platform one process sees: its host and that host's GPUs.
 *
 * Loaded once per process from the file named by NCCLSIM_PLATFORM (written by
 * ncclsim's Python side), or built from defaults: 8 x H100 on NVSwitches with
 * multicast, on the host whose index is NCCL_HOSTID's trailing number (or 0),
 * named NCCL_HOSTID as given (empty when unset). Shared by libcuda.so.1 and libnvidia-ml.so.1 so that the
 * driver and NVML always describe the same devices.
 *
 * File format (one `key = value` per line, `#` comments, sections):
 *
 *   [platform]
 *   host_index = 0
 *   hostname = ncclsim-h0          (informational here, named by ncclsim's Python
 *                                   side; empty when absent)
 *   driver_version = 13000
 *   multicast = 1                  (optional, default 0: the host's NVSwitches offer
 *                                   multicast objects, NVLink SHARP; the driver
 *                                   then answers CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
 *                                   with the GPU model's value)
 *   collnet = 1                    (optional, default 0: the host's network fabric
 *                                   reduces in its switches, SHARP-like; the net
 *                                   plugin then offers CollNet on every NIC)
 *   [gpu]                          (one section per GPU, in ordinal order)
 *   model = h100                   (key of ncclsim/platform/gpu_models.json)
 *   bus_id = 0000:18:00.0
 *   uuid = GPU-6e63736d-0000-0000-0000-000100000000   (optional)
 *   memory = 85045477376           (optional, bytes)
 *   numa_node = 0                  (optional)
 *   nvlink_remote = 0000:05:00.0*4,0000:06:00.0*5    (optional: link i -> remote
 *                                   PCI bus id, `*n` repeats; default: the
 *                                   model's link count spread over 4 switches)
 *   pcie_gen = 4                   (optional, 1..6: the GPU's PCIe link; default
 *   pcie_width = 16                 the model's, as is the width, 1..32)
 *   [nic]                          (one section per NIC of the host, in order;
 *                                   what the net plugin reports)
 *   name = mlx5_0
 *   bus_id = 0000:19:00.0
 *   speed = 400000                 (Mb/s)
 *   guid = 0x1d0001a000000000      (optional; default derived from host and index)
 *   port = 1                       (optional)
 *   latency = 0                    (optional, microseconds)
 */
#ifndef NCCLSIM_PLATFORM_H
#define NCCLSIM_PLATFORM_H

#include <stddef.h>
#include <stdint.h>

#define FC_MAX_GPUS 64
#define FC_MAX_NVLINKS 18
#define FC_MAX_ATTRIBUTES 160 /* > CU_DEVICE_ATTRIBUTE_MAX */
#define FC_MAX_NICS 64

/* One GPU model, generated at build time from gpu_models.json. */
typedef struct fc_gpu_model {
    const char *key;  /* "h100" */
    const char *name; /* "NVIDIA H100 80GB HBM3" */
    int sm;           /* 90 */
    uint64_t total_memory;
    unsigned pci_device_id, pci_subsystem_id;
    int pcie_gen, pcie_width, nvlinks, nvlink_version;
    unsigned bar1_mib, power_limit_w;
    unsigned clock_graphics_mhz, clock_sm_mhz, clock_memory_mhz, clock_video_mhz;
    /* attribute id -> value; has[] says which the model data defines */
    int attr[FC_MAX_ATTRIBUTES];
    unsigned char has[FC_MAX_ATTRIBUTES];
} fc_gpu_model;

typedef struct fc_pci_addr {
    unsigned domain, bus, device, function;
} fc_pci_addr;

typedef struct fc_gpu {
    const fc_gpu_model *model;
    fc_pci_addr pci;
    unsigned char uuid[16];
    uint64_t memory;
    int numa_node;
    int pcie_gen, pcie_width; /* the GPU's PCIe link (the model's unless the file says) */
    int nvlinks;
    fc_pci_addr nvlink_remote[FC_MAX_NVLINKS];
} fc_gpu;

typedef struct fc_nic {
    char name[64];
    fc_pci_addr pci;
    int speed_mbps;
    uint64_t guid;
    int port;
    float latency_us;
} fc_nic;

typedef struct fc_platform {
    int host_index;
    int driver_version;
    int multicast; /* NVSwitch multicast (NVLS) available to the host's GPUs */
    int collnet;   /* the fabric reduces in the network (SHARP): the net plugin offers CollNet */
    char hostname[256];
    char source[1024]; /* file it came from, or "built-in default" */
    int ngpus;
    fc_gpu gpu[FC_MAX_GPUS];
    int nnics;
    fc_nic nic[FC_MAX_NICS];
} fc_platform;

/* The process's platform, loaded on first use. NULL when the configuration
 * is invalid; the reason was printed once to stderr (file and line). */
const fc_platform *fc_platform_get(void);

/* Parse a configuration file into *out. Returns 0, or -1 with a message
 * "<file>:<line>: <problem>" in err. Exposed for tests. */
int fc_platform_load(const char *path, fc_platform *out, char *err, size_t errlen);

/* Fill *out with the built-in default (8 x H100 on host_index, no hostname). */
void fc_platform_default(fc_platform *out, int host_index);

const fc_gpu_model *fc_gpu_model_find(const char *key_or_name);
extern const fc_gpu_model fc_gpu_models[];
extern const int fc_gpu_model_count;

/* "0000:18:00.0" (lowercase, the form NCCL looks up). buf >= 16 bytes. */
void fc_pci_format(const fc_pci_addr *a, char *buf, size_t len);
int fc_pci_parse(const char *s, fc_pci_addr *out);
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". buf >= 41 bytes. */
void fc_uuid_format(const unsigned char uuid[16], char *buf, size_t len);

#endif
