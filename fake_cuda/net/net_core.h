/* The one implementation behind every exported interface version
 * (net_versions.c adapts each NCCL vtable to these calls).
 *
 * Devices: one per [nic] of the process's platform file (net_devices.c).
 * Transport: TCP on the interface NCCL's bootstrap uses (net_address.c),
 * or a Unix socket between processes of one machine (net_listener.c), one
 * non-blocking socket per send/recv comm,
 * messages framed as {magic, tag, size} + payload (net_connect.c sets up
 * connections, net_transfer.c moves messages). Progress happens inside the
 * calls NCCL makes anyway (isend/irecv/test), so the plugin starts no thread:
 * NCCL may dlclose a plugin once its last communicator is finalized, which a
 * running thread would not survive, and NCCL's proxy thread already polls.
 */
#ifndef NCCLSIM_NET_CORE_H
#define NCCLSIM_NET_CORE_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net_types.h"

#define FCN_PLUGIN_NAME "ncclsim"
#define FCN_MAX_RECVS 1 /* no grouped receives: a TCP stream has no clear-to-send */
#define FCN_MAX_COMMS 65536

/* Everything getProperties reports, whatever the version. */
typedef struct fcn_props {
    char *name;
    char *pci_path;
    uint64_t guid;
    int ptr_support;
    int speed_mbps;
    int port;
    float latency_us;
    int max_comms;
    int max_recvs;
    size_t max_p2p_bytes;
    size_t max_coll_bytes;
} fcn_props;

/* ---- net_devices.c ---- */
/* Load the devices (once) and remember NCCL's logger. */
ncclResult_t fcn_init(ncclDebugLogger_t logger);
ncclResult_t fcn_devices(int *ndev);
ncclResult_t fcn_get_properties(int dev, fcn_props *props);
/* v11+: a per-communicator context, for logs only. */
ncclResult_t fcn_ctx_create(uint64_t comm_id, int traffic_class, void **ctx);
ncclResult_t fcn_ctx_destroy(void *ctx);

/* Messages go to NCCL's debug log (when NCCL gave a logger) and to
 * NCCLSIM_LOG (level 2 for INFO, 1 for WARN). */
void fcn_log(ncclDebugLogLevel level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define FCN_INFO(...) fcn_log(NCCL_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define FCN_WARN(...) fcn_log(NCCL_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define FCN_TRACE(...) fcn_log(NCCL_LOG_TRACE, __FILE__, __LINE__, __VA_ARGS__)

/* ---- net_address.c ---- */
/* The address listeners bind to and its interface's name (false: none). */
bool fcn_listen_address(struct in_addr *addr, const char **ifname);
/* An address as text, for messages (thread-safe, unlike inet_ntoa). */
typedef struct { char s[INET_ADDRSTRLEN]; } fcn_addr_text;
fcn_addr_text fcn_address_text(struct in_addr a);

/* ---- net_connect.c ---- */
ncclResult_t fcn_listen(int dev, void *handle, void **listen_comm);
ncclResult_t fcn_connect(int dev, void *handle, void **send_comm);
ncclResult_t fcn_accept(void *listen_comm, void **recv_comm);
ncclResult_t fcn_close_listen(void *listen_comm);
ncclResult_t fcn_close_comm(void *comm); /* send or recv comm */

/* ---- net_transfer.c ---- */
ncclResult_t fcn_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t fcn_dereg_mr(void *comm, void *mhandle);
ncclResult_t fcn_isend(void *send_comm, void *data, size_t size, int tag, void **request);
/* The same for a message whose modelled arrival the caller decided (CollNet's). */
ncclResult_t fcn_isend_at(void *send_comm, void *data, size_t size, int tag, uint64_t arrive, void **request);
ncclResult_t fcn_irecv(void *recv_comm, int n, void **data, const size_t *sizes, const int *tags,
                       void **request);
ncclResult_t fcn_iflush(void *recv_comm, int n, void **data, const int *sizes, void **request);
ncclResult_t fcn_test(void *request, int *done, int *sizes);
/* The same, with a completed receive's modelled arrival (0: untimed). */
ncclResult_t fcn_test_at(void *request, int *done, int *sizes, uint64_t *arrive);

#endif
