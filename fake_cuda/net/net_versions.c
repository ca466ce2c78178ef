/* The exported interfaces, ncclNetPlugin_v5 ... ncclNetPlugin_v12: thin
 * adapters from each version's signatures and properties struct to the one
 * implementation in net_core.h. NCCL looks the symbols up newest first
 * (2.18 v6.., 2.19 v7.., 2.20-2.23 v8.., 2.24-2.25 v9.., 2.26-2.27 v10..,
 * 2.28-2.29 v11.., 2.30-2.32 v12..) and uses the first it finds.
 *
 * Optional entries are NULL, which every NCCL release checks before calling:
 * getDeviceMr/irecvConsumed (device offload only), makeVDevice (no virtual
 * NICs: NCCL then uses the physical devices), setNetAttr (hints). */
#include <stddef.h>
#include <string.h>

#include "collnet.h"
#include "net_core.h"

#define EXPORT __attribute__((visibility("default")))

/* Layout checks against the sizes NCCL's headers give on LP64 (see
 * net_types.h; tests/test_net_plugin.py also compares every field offset). */
_Static_assert(sizeof(ncclNetProperties_v6_t) == 48, "v6 properties");
_Static_assert(sizeof(ncclNetProperties_v7_t) == 56, "v7 properties");
_Static_assert(sizeof(ncclNetProperties_v8_t) == 64, "v8 properties");
_Static_assert(sizeof(ncclNetProperties_v9_t) == 104, "v9 properties");
_Static_assert(sizeof(ncclNetProperties_v11_t) == 112, "v11 properties");
_Static_assert(sizeof(ncclNetProperties_v12_t) == 128, "v12 properties");
_Static_assert(offsetof(ncclNet_v12_t, setNetAttr) == 21 * sizeof(void *), "v12 vtable");
_Static_assert(offsetof(ncclNet_v9_t, makeVDevice) == 19 * sizeof(void *), "v9 vtable");

/* ---- properties ---- */

#define FILL_V6(p, s)                                                                      \
    do {                                                                                   \
        memset((p), 0, sizeof *(p));                                                       \
        (p)->name = (s).name;                                                              \
        (p)->pciPath = (s).pci_path;                                                       \
        (p)->guid = (s).guid;                                                              \
        (p)->ptrSupport = (s).ptr_support;                                                 \
        (p)->speed = (s).speed_mbps;                                                       \
        (p)->port = (s).port;                                                              \
        (p)->latency = (s).latency_us;                                                     \
        (p)->maxComms = (s).max_comms;                                                     \
        (p)->maxRecvs = (s).max_recvs;                                                     \
    } while (0)

/* Fields v7+ adds: a plain host-side network, no device offload. */
#define FILL_V7(p)                                                                         \
    do {                                                                                   \
        (p)->netDeviceType = NCCL_NET_DEVICE_HOST;                                         \
        (p)->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;                           \
    } while (0)

/* v9+: each device is its own (one-device) virtual NIC. */
#define FILL_V9(p, s, dev)                                                                 \
    do {                                                                                   \
        (p)->regIsGlobal = 0;                                                              \
        (p)->forceFlush = 0;                                                               \
        (p)->vProps.ndevs = 1;                                                             \
        (p)->vProps.devs[0] = (dev);                                                       \
        (p)->maxP2pBytes = (s).max_p2p_bytes;                                              \
        (p)->maxCollBytes = (s).max_coll_bytes;                                            \
    } while (0)

static ncclResult_t props_v6(int dev, ncclNetProperties_v6_t *p)
{
    fcn_props s;
    ncclResult_t rc = fcn_get_properties(dev, &s);
    if (rc == ncclSuccess) FILL_V6(p, s);
    return rc;
}

static ncclResult_t props_v7(int dev, ncclNetProperties_v7_t *p)
{
    fcn_props s;
    ncclResult_t rc = fcn_get_properties(dev, &s);
    if (rc != ncclSuccess) return rc;
    FILL_V6(p, s);
    FILL_V7(p);
    return ncclSuccess;
}

static ncclResult_t props_v8(int dev, ncclNetProperties_v8_t *p)
{
    fcn_props s;
    ncclResult_t rc = fcn_get_properties(dev, &s);
    if (rc != ncclSuccess) return rc;
    FILL_V6(p, s);
    FILL_V7(p);
    p->regIsGlobal = 0;
    return ncclSuccess;
}

static ncclResult_t props_v9(int dev, ncclNetProperties_v9_t *p)
{
    fcn_props s;
    ncclResult_t rc = fcn_get_properties(dev, &s);
    if (rc != ncclSuccess) return rc;
    FILL_V6(p, s);
    FILL_V7(p);
    FILL_V9(p, s, dev);
    return ncclSuccess;
}

static ncclResult_t props_v11(int dev, ncclNetProperties_v11_t *p)
{
    fcn_props s;
    ncclResult_t rc = fcn_get_properties(dev, &s);
    if (rc != ncclSuccess) return rc;
    FILL_V6(p, s);
    FILL_V7(p);
    FILL_V9(p, s, dev);
    p->maxMultiRequestSize = 1;
    return ncclSuccess;
}

static ncclResult_t props_v12(int dev, ncclNetProperties_v12_t *p)
{
    fcn_props s;
    ncclResult_t rc = fcn_get_properties(dev, &s);
    if (rc != ncclSuccess) return rc;
    FILL_V6(p, s);
    FILL_V7(p);
    FILL_V9(p, s, dev);
    p->maxMultiRequestSize = 1;
    p->railId = NCCL_NET_ID_UNDEF; /* let NCCL decide rails and planes */
    p->planeId = NCCL_NET_ID_UNDEF;
    return ncclSuccess;
}

/* ---- init / finalize ---- */

static ncclResult_t init_v5(ncclDebugLogger_t log) { return fcn_init(log); }

static ncclResult_t init_v10(ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    (void)prof; /* no profiler events */
    return fcn_init(log);
}

/* v11+: called once per communicator; the context lives until finalize. */
static ncclResult_t init_v11(void **ctx, uint64_t comm_id, ncclNetCommConfig_v10_t *config,
                             ncclDebugLogger_t log, ncclProfilerCallback_t prof)
{
    (void)prof;
    ncclResult_t rc = fcn_init(log);
    if (rc != ncclSuccess) return rc;
    return fcn_ctx_create(comm_id, config ? config->trafficClass : -1, ctx);
}

/* ---- connection setup ---- */

static ncclResult_t listen_v11(void *ctx, int dev, void *handle, void **listen_comm)
{
    (void)ctx;
    return fcn_listen(dev, handle, listen_comm);
}

static ncclResult_t connect_v5(int dev, void *handle, void **send_comm)
{
    return fcn_connect(dev, handle, send_comm);
}

/* The device handle is only for offload-capable (non-HOST) plugins; NCCL
 * may pass NULL, and never expects it filled for a HOST device. */
static ncclResult_t connect_v7(int dev, void *handle, void **send_comm, ncclNetDeviceHandle_v7_t **dh)
{
    (void)dh;
    return fcn_connect(dev, handle, send_comm);
}

static ncclResult_t connect_v10(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                                void **send_comm, ncclNetDeviceHandle_v7_t **dh)
{
    (void)config;
    (void)dh;
    return fcn_connect(dev, handle, send_comm);
}

static ncclResult_t connect_v11(void *ctx, int dev, void *handle, void **send_comm,
                                ncclNetDeviceHandle_v7_t **dh)
{
    (void)ctx;
    (void)dh;
    return fcn_connect(dev, handle, send_comm);
}

static ncclResult_t accept_v5(void *listen_comm, void **recv_comm)
{
    return fcn_accept(listen_comm, recv_comm);
}

static ncclResult_t accept_v7(void *listen_comm, void **recv_comm, ncclNetDeviceHandle_v7_t **dh)
{
    (void)dh;
    return fcn_accept(listen_comm, recv_comm);
}

/* ---- memory registration ---- */

static ncclResult_t regmr_int(void *comm, void *data, int size, int type, void **mhandle)
{
    if (size < 0) return ncclInvalidArgument;
    return fcn_reg_mr(comm, data, (size_t)size, type, mhandle);
}

/* DMA-BUF is never advertised (no NCCL_PTR_DMABUF), but the entry exists
 * since v6; the range is all that matters here. */
static ncclResult_t regmr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                                 int fd, void **mhandle)
{
    (void)offset;
    (void)fd;
    return fcn_reg_mr(comm, data, size, type, mhandle);
}

/* ---- data movement ---- */

static ncclResult_t isend_int(void *send_comm, void *data, int size, int tag, void *mhandle,
                              void **request)
{
    (void)mhandle;
    if (size < 0) return ncclInvalidArgument;
    return fcn_isend(send_comm, data, (size_t)size, tag, request);
}

static ncclResult_t isend_v9(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                             void **request)
{
    (void)mhandle;
    return fcn_isend(send_comm, data, size, tag, request);
}

static ncclResult_t isend_v10(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                              void *phandle, void **request)
{
    (void)mhandle;
    (void)phandle; /* profiler handle: no events */
    return fcn_isend(send_comm, data, size, tag, request);
}

static ncclResult_t irecv_int(void *recv_comm, int n, void **data, int *sizes, int *tags,
                              void **mhandles, void **request)
{
    (void)mhandles;
    size_t wide[FCN_MAX_RECVS] = {0};
    if (!sizes) return ncclInvalidArgument;
    if (n < 1 || n > FCN_MAX_RECVS) /* fcn_irecv reports the bad count */
        return fcn_irecv(recv_comm, n, data, wide, tags, request);
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 0) return ncclInvalidArgument;
        wide[i] = (size_t)sizes[i];
    }
    return fcn_irecv(recv_comm, n, data, wide, tags, request);
}

static ncclResult_t irecv_v9(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                             void **mhandles, void **request)
{
    (void)mhandles;
    return fcn_irecv(recv_comm, n, data, sizes, tags, request);
}

static ncclResult_t irecv_v10(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                              void **mhandles, void **phandles, void **request)
{
    (void)mhandles;
    (void)phandles;
    return fcn_irecv(recv_comm, n, data, sizes, tags, request);
}

static ncclResult_t iflush_all(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                               void **request)
{
    (void)mhandles;
    return fcn_iflush(recv_comm, n, data, sizes, request);
}

/* ---- the exported tables ---- */

#define COMMON_TAIL                                                                        \
    .deregMr = fcn_dereg_mr, .iflush = iflush_all, .test = fcn_test,                       \
    .closeSend = fcn_close_comm, .closeRecv = fcn_close_comm, .closeListen = fcn_close_listen

EXPORT ncclNet_v5_t ncclNetPlugin_v5 = {
    .name = FCN_PLUGIN_NAME, .init = init_v5, .devices = fcn_devices, .getProperties = props_v6,
    .listen = fcn_listen, .connect = connect_v5, .accept = accept_v5, .regMr = regmr_int,
    .isend = isend_int, .irecv = irecv_int, COMMON_TAIL,
};

EXPORT ncclNet_v6_t ncclNetPlugin_v6 = {
    .name = FCN_PLUGIN_NAME, .init = init_v5, .devices = fcn_devices, .getProperties = props_v6,
    .listen = fcn_listen, .connect = connect_v5, .accept = accept_v5, .regMr = regmr_int,
    .regMrDmaBuf = regmr_dmabuf, .isend = isend_int, .irecv = irecv_int, COMMON_TAIL,
};

EXPORT ncclNet_v7_t ncclNetPlugin_v7 = {
    .name = FCN_PLUGIN_NAME, .init = init_v5, .devices = fcn_devices, .getProperties = props_v7,
    .listen = fcn_listen, .connect = connect_v7, .accept = accept_v7, .regMr = regmr_int,
    .regMrDmaBuf = regmr_dmabuf, .isend = isend_int, .irecv = irecv_int, COMMON_TAIL,
    .getDeviceMr = NULL, .irecvConsumed = NULL,
};

EXPORT ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = FCN_PLUGIN_NAME, .init = init_v5, .devices = fcn_devices, .getProperties = props_v8,
    .listen = fcn_listen, .connect = connect_v7, .accept = accept_v7, .regMr = fcn_reg_mr,
    .regMrDmaBuf = regmr_dmabuf, .isend = isend_int, .irecv = irecv_int, COMMON_TAIL,
    .getDeviceMr = NULL, .irecvConsumed = NULL,
};

EXPORT ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = FCN_PLUGIN_NAME, .init = init_v5, .devices = fcn_devices, .getProperties = props_v9,
    .listen = fcn_listen, .connect = connect_v7, .accept = accept_v7, .regMr = fcn_reg_mr,
    .regMrDmaBuf = regmr_dmabuf, .isend = isend_v9, .irecv = irecv_v9, COMMON_TAIL,
    .getDeviceMr = NULL, .irecvConsumed = NULL, .makeVDevice = NULL,
};

EXPORT ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = FCN_PLUGIN_NAME, .init = init_v10, .devices = fcn_devices, .getProperties = props_v9,
    .listen = fcn_listen, .connect = connect_v10, .accept = accept_v7, .regMr = fcn_reg_mr,
    .regMrDmaBuf = regmr_dmabuf, .isend = isend_v10, .irecv = irecv_v10, COMMON_TAIL,
    .getDeviceMr = NULL, .irecvConsumed = NULL, .makeVDevice = NULL,
};

EXPORT ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = FCN_PLUGIN_NAME, .init = init_v11, .devices = fcn_devices, .getProperties = props_v11,
    .listen = listen_v11, .connect = connect_v11, .accept = accept_v7, .regMr = fcn_reg_mr,
    .regMrDmaBuf = regmr_dmabuf, .isend = isend_v10, .irecv = irecv_v10, COMMON_TAIL,
    .getDeviceMr = NULL, .irecvConsumed = NULL, .makeVDevice = NULL, .finalize = fcn_ctx_destroy,
    .setNetAttr = NULL,
};

EXPORT ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = FCN_PLUGIN_NAME, .init = init_v11, .devices = fcn_devices, .getProperties = props_v12,
    .listen = listen_v11, .connect = connect_v11, .accept = accept_v7, .regMr = fcn_reg_mr,
    .regMrDmaBuf = regmr_dmabuf, .isend = isend_v10, .irecv = irecv_v10, COMMON_TAIL,
    .getDeviceMr = NULL, .irecvConsumed = NULL, .makeVDevice = NULL, .finalize = fcn_ctx_destroy,
    .setNetAttr = NULL,
};

/* ---- CollNet ---- */

static ncclResult_t coll_iallreduce(void *coll, void *send, void *recv, int count, int type, int op, void *smh,
                                    void *rmh, void **request)
{
    (void)smh, (void)rmh;
    return count < 0 ? ncclInvalidArgument : fcn_collnet_iallreduce(coll, send, recv, (size_t)count, type, op, request);
}

/* Received data is in place as soon as it arrived: nothing to flush. */
static ncclResult_t coll_iflush(void *coll, void *data, int size, void *mhandle, void **request)
{
    (void)coll, (void)data, (void)size, (void)mhandle;
    if (!request) return ncclInvalidArgument;
    *request = NULL;
    return ncclSuccess;
}

/* NCCL hands one contiguous part per call (nParts 1). */
static ncclResult_t coll_iallgather(void *coll, void *send, int nRecvParts, ncclNetSGE_v8_t *recvParts,
                                    size_t bytesPerRank, size_t off, size_t bytes, void *smh, void **request)
{
    (void)smh;
    if (nRecvParts != 1 || !recvParts || recvParts->size < bytes) return ncclInvalidArgument;
    return fcn_collnet_iallgather(coll, send, recvParts->address, bytesPerRank, off, bytes, request);
}

static ncclResult_t coll_ireducescatter(void *coll, int nSendParts, ncclNetSGE_v8_t *sendParts, void *recv,
                                        size_t bytesPerRank, size_t off, size_t bytes, int type, int op, void *rmh,
                                        void **request)
{
    (void)rmh;
    if (nSendParts != 1 || !sendParts || sendParts->size < bytes) return ncclInvalidArgument;
    return fcn_collnet_ireducescatter(coll, sendParts->address, recv, bytesPerRank, off, bytes, type, op, request);
}

EXPORT ncclCollNet_v8_t ncclCollNetPlugin_v8 = {
    .name = FCN_PLUGIN_NAME, .init = init_v5, .devices = fcn_collnet_devices, .getProperties = props_v8,
    .listen = fcn_listen, .connect = fcn_collnet_connect, .reduceSupport = fcn_collnet_reduce_support,
    .regMr = fcn_reg_mr, .regMrDmaBuf = regmr_dmabuf, .deregMr = fcn_dereg_mr, .iallreduce = coll_iallreduce,
    .iallgather = coll_iallgather, .ireducescatter = coll_ireducescatter, .iflush = coll_iflush,
    .test = fcn_collnet_test, .closeColl = fcn_collnet_close, .closeListen = fcn_close_listen,
};
