/* The plugin's devices: one per [nic] of the process's platform file, in
 * file order, and the logging bridge to NCCL's debug log. */
#include <arpa/inet.h>
#include <net/if.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "net_core.h"
#include "platform.h"

typedef struct fcn_device {
    char name[64];
    /* Under /sys/devices like a real NIC's. It need not exist: NCCL places a
     * NIC whose <net name> the topology XML already holds where the XML says,
     * and attaches any other to the first CPU. */
    char pci_path[96];
    const fc_nic *nic;
} fcn_device;

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static fcn_device devices[FC_MAX_NICS];
static int ndevices = -1; /* -1: not loaded yet */
static ncclDebugLogger_t nccl_logger;

void fcn_log(ncclDebugLogLevel level, const char *file, int line, const char *fmt, ...)
{
    int ours = level == NCCL_LOG_WARN ? FC_LOG_ERROR : level == NCCL_LOG_INFO ? FC_LOG_INFO
                                                                             : FC_LOG_DEBUG;
    ncclDebugLogger_t logger = __atomic_load_n(&nccl_logger, __ATOMIC_ACQUIRE);
    if (!logger && fc_log_level() < ours) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (logger) logger(level, NCCL_INIT | NCCL_NET, file, line, "NET/" FCN_PLUGIN_NAME " : %s", msg);
    FC_LOG(ours, "net: %s", msg);
}

static void load_devices(const fc_platform *p)
{
    char list[2048] = "";
    size_t used = 0;
    for (int i = 0; i < p->nnics; i++) {
        fcn_device *d = &devices[i];
        char bus[32];
        d->nic = &p->nic[i];
        snprintf(d->name, sizeof d->name, "%s", d->nic->name);
        fc_pci_format(&d->nic->pci, bus, sizeof bus);
        snprintf(d->pci_path, sizeof d->pci_path, "/sys/devices/pci%04x:00/%s", d->nic->pci.domain,
                 bus);
        int n = snprintf(list + used, sizeof list - used, " [%d]%s:%d/%s/%dMb/s/guid=%#llx", i,
                         d->name, d->nic->port, bus, d->nic->speed_mbps,
                         (unsigned long long)d->nic->guid);
        if (n > 0 && (size_t)n < sizeof list - used) used += (size_t)n;
    }
    ndevices = p->nnics;
    struct in_addr addr;
    const char *ifname;
    char where[IF_NAMESIZE + INET_ADDRSTRLEN + 16] = "no interface matches NCCL_SOCKET_IFNAME";
    if (fcn_listen_address(&addr, &ifname))
        snprintf(where, sizeof where, "TCP on %s %s", ifname, fcn_address_text(addr).s);
    if (ndevices)
        FCN_INFO("Using%s (%s; platform %s)", list, where, p->source);
    else
        FCN_INFO("no [nic] in the platform (%s): no devices", p->source);
}

ncclResult_t fcn_init(ncclDebugLogger_t logger)
{
    if (logger) __atomic_store_n(&nccl_logger, logger, __ATOMIC_RELEASE);
    pthread_mutex_lock(&init_lock);
    ncclResult_t rc = ncclSuccess;
    if (ndevices < 0) {
        const fc_platform *p = fc_platform_get();
        if (p)
            load_devices(p);
        else
            rc = ncclInvalidUsage; /* fc_platform_get() said why on stderr */
    }
    pthread_mutex_unlock(&init_lock);
    if (rc != ncclSuccess) FCN_WARN("invalid platform configuration (NCCLSIM_PLATFORM)");
    return rc;
}

static int loaded_count(void)
{
    pthread_mutex_lock(&init_lock);
    int n = ndevices;
    pthread_mutex_unlock(&init_lock);
    return n;
}

ncclResult_t fcn_devices(int *ndev)
{
    if (!ndev) return ncclInvalidArgument;
    int n = loaded_count();
    if (n < 0) {
        FCN_WARN("devices() called before init()");
        return ncclInvalidUsage;
    }
    *ndev = n;
    return ncclSuccess;
}

ncclResult_t fcn_get_properties(int dev, fcn_props *props)
{
    int n = loaded_count();
    if (!props || dev < 0 || dev >= n) {
        FCN_WARN("getProperties: no device %d (%d devices)", dev, n < 0 ? 0 : n);
        return ncclInvalidArgument;
    }
    const fcn_device *d = &devices[dev];
    *props = (fcn_props){
        .name = (char *)d->name,
        .pci_path = (char *)d->pci_path,
        .guid = d->nic->guid,
        /* Device memory is host memory here, so receiving straight into it
         * (GPU Direct RDMA) is what really happens. */
        .ptr_support = NCCL_PTR_HOST | NCCL_PTR_CUDA,
        .speed_mbps = d->nic->speed_mbps,
        .port = d->nic->port,
        .latency_us = d->nic->latency_us,
        .max_comms = FCN_MAX_COMMS,
        .max_recvs = FCN_MAX_RECVS,
        .max_p2p_bytes = NCCL_MAX_NET_SIZE_BYTES,
        .max_coll_bytes = NCCL_MAX_NET_SIZE_BYTES,
    };
    return ncclSuccess;
}

#define FCN_CTX_MAGIC 0x6e736378u

typedef struct fcn_ctx {
    uint32_t magic;
    int traffic_class;
    uint64_t comm_id;
} fcn_ctx;

ncclResult_t fcn_ctx_create(uint64_t comm_id, int traffic_class, void **ctx)
{
    if (!ctx) return ncclInvalidArgument;
    fcn_ctx *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    *c = (fcn_ctx){.magic = FCN_CTX_MAGIC, .traffic_class = traffic_class, .comm_id = comm_id};
    *ctx = c;
    FC_LOG(FC_LOG_DEBUG, "net: context %p for communicator %#llx (traffic class %d)", (void *)c,
           (unsigned long long)comm_id, traffic_class);
    return ncclSuccess;
}

ncclResult_t fcn_ctx_destroy(void *ctx)
{
    fcn_ctx *c = ctx;
    if (!c) return ncclSuccess;
    if (c->magic != FCN_CTX_MAGIC) {
        FCN_WARN("finalize: %p is not a context of this plugin", ctx);
        return ncclInvalidArgument;
    }
    c->magic = 0;
    free(c);
    return ncclSuccess;
}
