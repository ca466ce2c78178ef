/* The NCCL net plugin ABI, versions 5 to 12, written from the layouts in
 * NVIDIA/nccl's public plugin headers (ext-net/example/nccl/net_v*.h up to
 * 2.29, plugins/net/example/nccl/net_v*.h from 2.30; checked against tags
 * v2.18.6-1 ... v2.30.7-1 and the 2.31.0a7 sources). Only what the plugin
 * implements is spelled out; every struct and vtable keeps NCCL's member order
 * and types exactly, since NCCL reads them by offset.
 *
 * Per-version changes this file encodes:
 *   v5  int sizes, no regMrDmaBuf; properties = v6 layout
 *   v6  + regMrDmaBuf
 *   v7  properties + netDeviceType/netDeviceVersion; connect/accept take a
 *       device handle; + getDeviceMr, irecvConsumed
 *   v8  properties + regIsGlobal; regMr takes size_t
 *   v9  properties + forceFlush, vProps (4 devs), maxP2pBytes, maxCollBytes;
 *       isend/irecv take size_t; + makeVDevice
 *   v10 init takes a profiler callback; connect takes a comm config;
 *       isend/irecv take phandle(s)
 *   v11 init/listen/connect take a per-communicator context; properties +
 *       maxMultiRequestSize; + finalize, setNetAttr
 *   v12 vProps holds 8 devs; properties + railId, planeId (int16)
 */
#ifndef NCCLSIM_NET_TYPES_H
#define NCCLSIM_NET_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
} ncclResult_t;

typedef enum {
    NCCL_LOG_NONE = 0,
    NCCL_LOG_VERSION = 1,
    NCCL_LOG_WARN = 2,
    NCCL_LOG_INFO = 3,
    NCCL_LOG_ABORT = 4,
    NCCL_LOG_TRACE = 5,
} ncclDebugLogLevel;

/* Subsystem bits of the logger's `flags`. */
#define NCCL_INIT 0x1UL
#define NCCL_NET 0x10UL

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char *file,
                                  int line, const char *fmt, ...);
typedef ncclResult_t (*ncclProfilerCallback_t)(void **eHandle, int type, void *pHandle,
                                               int64_t pluginId, void *extData);

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_MAX_NET_SIZE_BYTES (1024L * 1024 * 1024 * 1024) /* 1 TB, as NCCL's own plugins */
#define NCCL_NET_DEVICE_INVALID_VERSION 0x0
#define NCCL_NET_ID_UNDEF (-1)

typedef enum {
    NCCL_NET_DEVICE_HOST = 0,
    NCCL_NET_DEVICE_UNPACK = 1,
} ncclNetDeviceType;

/* Identical from v7 to v12; only passed through (this plugin never offloads). */
typedef struct {
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
    void *handle;
    size_t size;
    int needsProxyProgress;
} ncclNetDeviceHandle_v7_t;

/* ---- properties ---- */

typedef struct { /* also v5 */
    char *name;
    char *pciPath;
    uint64_t guid;
    int ptrSupport;
    int speed;
    int port;
    float latency;
    int maxComms;
    int maxRecvs;
} ncclNetProperties_v6_t;

typedef struct {
    char *name;
    char *pciPath;
    uint64_t guid;
    int ptrSupport;
    int speed;
    int port;
    float latency;
    int maxComms;
    int maxRecvs;
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
} ncclNetProperties_v7_t;

typedef struct {
    char *name;
    char *pciPath;
    uint64_t guid;
    int ptrSupport;
    int regIsGlobal;
    int speed;
    int port;
    float latency;
    int maxComms;
    int maxRecvs;
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
} ncclNetProperties_v8_t;

#define NCCL_NET_MAX_DEVS_PER_NIC_V9 4 /* v9, v10 and v11 */
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8

typedef struct {
    int ndevs;
    int devs[NCCL_NET_MAX_DEVS_PER_NIC_V9];
} ncclNetVDeviceProps_v9_t;

typedef struct {
    int ndevs;
    int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;

typedef struct { /* also v10 */
    char *name;
    char *pciPath;
    uint64_t guid;
    int ptrSupport;
    int regIsGlobal;
    int forceFlush;
    int speed;
    int port;
    float latency;
    int maxComms;
    int maxRecvs;
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
    ncclNetVDeviceProps_v9_t vProps;
    size_t maxP2pBytes;
    size_t maxCollBytes;
} ncclNetProperties_v9_t;

typedef struct {
    char *name;
    char *pciPath;
    uint64_t guid;
    int ptrSupport;
    int regIsGlobal;
    int forceFlush;
    int speed;
    int port;
    float latency;
    int maxComms;
    int maxRecvs;
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
    ncclNetVDeviceProps_v9_t vProps;
    size_t maxP2pBytes;
    size_t maxCollBytes;
    int maxMultiRequestSize;
} ncclNetProperties_v11_t;

typedef struct {
    char *name;
    char *pciPath;
    uint64_t guid;
    int ptrSupport;
    int regIsGlobal;
    int forceFlush;
    int speed;
    int port;
    float latency;
    int maxComms;
    int maxRecvs;
    ncclNetDeviceType netDeviceType;
    int netDeviceVersion;
    ncclNetVDeviceProps_v12_t vProps;
    size_t maxP2pBytes;
    size_t maxCollBytes;
    int maxMultiRequestSize;
    int16_t railId;
    int16_t planeId;
} ncclNetProperties_v12_t;

/* v10 .. v12: passed to connect (v10) or init (v11+). */
typedef struct {
    int trafficClass;
} ncclNetCommConfig_v10_t;

/* v11, v12: setNetAttr's argument (hints; ignored here). */
typedef struct {
    int32_t maxConcurrentPeers;
    int32_t minConcurrentPeers;
    int32_t maxFlowsPerPeer;
    int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;

typedef struct {
    ncclNetCommAttr_v11_t sendCommAttr;
    ncclNetCommAttr_v11_t recvCommAttr;
    uint32_t op;
    uint32_t algo;
    uint32_t proto;
} ncclNetAttr_v11_t;

/* ---- vtables ---- */

typedef struct {
    const char *name;
    ncclResult_t (*init)(ncclDebugLogger_t logFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v6_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(int dev, void *handle, void **sendComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm);
    ncclResult_t (*regMr)(void *comm, void *data, int size, int type, void **mhandle);
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle, void **request);
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags, void **mhandles,
                          void **request);
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
} ncclNet_v5_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(ncclDebugLogger_t logFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v6_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(int dev, void *handle, void **sendComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm);
    ncclResult_t (*regMr)(void *comm, void *data, int size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                void **mhandle);
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle, void **request);
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags, void **mhandles,
                          void **request);
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
} ncclNet_v6_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(ncclDebugLogger_t logFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v7_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v7_t **sendDevComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_v7_t **recvDevComm);
    ncclResult_t (*regMr)(void *comm, void *data, int size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                void **mhandle);
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle, void **request);
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags, void **mhandles,
                          void **request);
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
    ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
} ncclNet_v7_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(ncclDebugLogger_t logFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v7_t **sendDevComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_v7_t **recvDevComm);
    ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                void **mhandle);
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle, void **request);
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags, void **mhandles,
                          void **request);
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
    ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
} ncclNet_v8_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(ncclDebugLogger_t logFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v7_t **sendDevComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_v7_t **recvDevComm);
    ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                void **mhandle);
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                          void **request);
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                          void **request);
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
    ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
    ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v9_t *props);
} ncclNet_v9_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t *config, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v7_t **sendDevComm);
    ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_v7_t **recvDevComm);
    ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                                void **mhandle);
    ncclResult_t (*deregMr)(void *comm, void *mhandle);
    ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                          void *phandle, void **request);
    ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                          void **phandles, void **request);
    ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request);
    ncclResult_t (*test)(void *request, int *done, int *sizes);
    ncclResult_t (*closeSend)(void *sendComm);
    ncclResult_t (*closeRecv)(void *recvComm);
    ncclResult_t (*closeListen)(void *listenComm);
    ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
    ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
    ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v9_t *props);
} ncclNet_v10_t;

/* v11 and v12 share their functions; the properties and vProps types differ. */
#define FCN_NET_V11_LIKE(PROPS, VPROPS)                                                             \
    struct {                                                                                       \
        const char *name;                                                                          \
        ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_v10_t *config,          \
                             ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);   \
        ncclResult_t (*devices)(int *ndev);                                                        \
        ncclResult_t (*getProperties)(int dev, PROPS *props);                                      \
        ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);               \
        ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,                 \
                                ncclNetDeviceHandle_v7_t **sendDevComm);                           \
        ncclResult_t (*accept)(void *listenComm, void **recvComm,                                  \
                               ncclNetDeviceHandle_v7_t **recvDevComm);                            \
        ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);      \
        ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, \
                                    int fd, void **mhandle);                                       \
        ncclResult_t (*deregMr)(void *comm, void *mhandle);                                        \
        ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,     \
                              void *phandle, void **request);                                      \
        ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,        \
                              void **mhandles, void **phandles, void **request);                   \
        ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,    \
                               void **request);                                                    \
        ncclResult_t (*test)(void *request, int *done, int *sizes);                                \
        ncclResult_t (*closeSend)(void *sendComm);                                                 \
        ncclResult_t (*closeRecv)(void *recvComm);                                                 \
        ncclResult_t (*closeListen)(void *listenComm);                                             \
        ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);               \
        ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);                       \
        ncclResult_t (*makeVDevice)(int *d, VPROPS *props);                                        \
        ncclResult_t (*finalize)(void *ctx);                                                       \
        ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v11_t *netAttr);                         \
    }

typedef FCN_NET_V11_LIKE(ncclNetProperties_v11_t, ncclNetVDeviceProps_v9_t) ncclNet_v11_t;
typedef FCN_NET_V11_LIKE(ncclNetProperties_v12_t, ncclNetVDeviceProps_v12_t) ncclNet_v12_t;

/* ---- CollNet (nccl_net.h / net_v8.h); NCCL 2.23 to 2.32 all load v8 ---- */

typedef struct {
    void *mhandle;
    void *address;
    uint32_t size;
} ncclNetSGE_v8_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(ncclDebugLogger_t logFunction);
    ncclResult_t (*devices)(int *ndev);
    ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
    ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
    ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm, void **collComm);
    ncclResult_t (*reduceSupport)(int dataType, int redOp, int *supported);
    ncclResult_t (*regMr)(void *collComm, void *data, size_t size, int type, void **mhandle);
    ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type, uint64_t offset, int fd,
                                void **mhandle);
    ncclResult_t (*deregMr)(void *collComm, void *mhandle);
    ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, int count, int dataType, int redOp,
                               void *sendMhandle, void *recvMhandle, void **request);
    ncclResult_t (*iallgather)(void *collComm, void *sendData, int nRecvParts, ncclNetSGE_v8_t *recvParts,
                               size_t bytesPerRank, size_t windowOffset, size_t windowBytes, void *sendMhandle,
                               void **request);
    ncclResult_t (*ireducescatter)(void *collComm, int nSendParts, ncclNetSGE_v8_t *sendParts, void *recvData,
                                   size_t bytesPerRank, size_t windowOffset, size_t windowBytes, int dataType,
                                   int redOp, void *recvMhandle, void **request);
    ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle, void **request);
    ncclResult_t (*test)(void *request, int *done, int *size);
    ncclResult_t (*closeColl)(void *collComm);
    ncclResult_t (*closeListen)(void *listenComm);
} ncclCollNet_v8_t;

#endif
