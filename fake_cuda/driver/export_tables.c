/* cuGetExportTable: the CUDA runtime's private tables of driver functions,
 * looked up by UUID. Each table is an array of pointers whose slot 0 usually
 * holds the table's size in bytes.
 *
 * NVIDIA's runtime (libcudart, and the copy linked into libnccl) refuses to
 * start without these. Slots whose meaning is unknown answer
 * CUDA_ERROR_NOT_SUPPORTED instead of holding NULL, so that a runtime calling
 * one fails with an error rather than a crash.
 *
 * The INTEGRITY_CHECK table is answered only to interoperate with NVIDIA's
 * unmodified runtime on machines without NVIDIA hardware. */
#include "internal.h"
#include "integrity.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Slot 0 of most tables: the table's size in bytes. */
#define TABLE_SIZE(entries) ((const void *)(uintptr_t)((entries) * sizeof(void *)))

/* A slot with no known meaning: report the call, fail cleanly. Declared
 * without parameters; extra register arguments are harmless on x86-64 and
 * aarch64. */
#define UNKNOWN_SLOT(table, slot)                                              \
    static CUresult table##_slot##slot(void)                                   \
    {                                                                          \
        API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "\"table\":\"%s\",\"slot\":%d", #table, slot); \
    }

/* The runtime's fatbin wrapper (__fatBinC_Wrapper_t) and the fatbin header it
 * points at; cuModuleLoadData takes the latter. */
#define FATBINC_WRAPPER_MAGIC 0x466243b1u
#define FATBIN_MAGIC 0xba55ed50u
typedef struct {
    uint32_t magic;
    uint32_t version;
    const void *data;          /* fatbin header */
    const void *filename_or_fatbins;
} fatbinc_wrapper;

/* ------------------------------------------------------------------------ */
/* CUDART_INTERFACE                                                          */

static CUresult load_fatbin(CUmodule *module, const void *fatbin)
{
    if (!module || !fatbin) return CUDA_ERROR_INVALID_VALUE;
    uint32_t magic;
    memcpy(&magic, fatbin, sizeof magic);
    if (magic != FATBIN_MAGIC) return CUDA_ERROR_INVALID_IMAGE;
    return cuModuleLoadData(module, fatbin);
}

static CUresult unwrap_fatbin(const void *wrapper, const void **fatbin)
{
    if (!wrapper) return CUDA_ERROR_INVALID_VALUE;
    const fatbinc_wrapper *w = wrapper;
    if (w->magic != FATBINC_WRAPPER_MAGIC) return CUDA_ERROR_INVALID_IMAGE;
    *fatbin = w->data;
    return CUDA_SUCCESS;
}

/* [1] module from the runtime's fatbin wrapper. */
static CUresult cudart_module_from_wrapper(CUmodule *module, const void *wrapper)
{
    const void *fatbin = NULL;
    CUresult r = unwrap_fatbin(wrapper, &fatbin);
    if (r == CUDA_SUCCESS) r = load_fatbin(module, fatbin);
    API_RETURN(r, "\"wrapper\":\"%p\"", wrapper);
}

/* [2] the device's primary context, retained, called once per device. */
static CUresult cudart_get_primary_context(CUcontext *out, CUdevice dev)
{
    CUresult r = fc_check_init();
    if (r == CUDA_SUCCESS) {
        if (!out)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!fc_valid_device(dev))
            r = CUDA_ERROR_INVALID_DEVICE;
        else
            r = fc_primary_ctx_retain(dev, out);
    }
    API_RETURN(r, "\"dev\":%d", (int)dev);
}

/* [6] and [8]: the same with three more arguments whose meaning is not
 * public (apparently a count and two arrays, JIT options perhaps). Only the
 * form without them, the one seen, is accepted. */
static CUresult cudart_module_from_wrapper_ext(CUmodule *module, const void *wrapper,
                                               void *arg3, void *arg4, unsigned arg5)
{
    const void *fatbin = NULL;
    CUresult r;
    if (arg3 || arg4 || arg5)
        r = CUDA_ERROR_NOT_SUPPORTED;
    else if ((r = unwrap_fatbin(wrapper, &fatbin)) == CUDA_SUCCESS)
        r = load_fatbin(module, fatbin);
    API_RETURN(r, "\"wrapper\":\"%p\",\"arg5\":%u", wrapper, arg5);
}

static CUresult cudart_module_from_fatbin_ext(const void *fatbin, CUmodule *module,
                                              void *arg3, void *arg4, unsigned arg5)
{
    CUresult r = (arg3 || arg4 || arg5) ? CUDA_ERROR_NOT_SUPPORTED : load_fatbin(module, fatbin);
    API_RETURN(r, "\"fatbin\":\"%p\",\"arg5\":%u", fatbin, arg5);
}

/* [7] takes one integer; nothing for a simulator to do. */
static CUresult cudart_slot7(uintptr_t arg)
{
    API_RETURN(CUDA_SUCCESS, "\"arg\":%lu", (unsigned long)arg);
}

/* [9] cuLaunchKernel with the arguments packed in `extra` only. */
static CUresult cudart_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                              unsigned bx, unsigned by, unsigned bz, unsigned shared,
                              CUstream stream, void **extra)
{
    CUresult r = cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, NULL, extra);
    API_RETURN(r, "\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"shared\":%u", gx, gy, gz, bx,
               by, bz, shared);
}

UNKNOWN_SLOT(cudart, 3)
UNKNOWN_SLOT(cudart, 4)
UNKNOWN_SLOT(cudart, 5)

/* 10 entries were accepted by cudart 12.4, 12.9 and 13.0; with a larger size
 * the runtime may call slots whose meaning is unknown. */
static const void *const cudart_interface[10] = {
    TABLE_SIZE(10),
    (const void *)cudart_module_from_wrapper,
    (const void *)cudart_get_primary_context,
    (const void *)cudart_slot3,
    (const void *)cudart_slot4,
    (const void *)cudart_slot5,
    (const void *)cudart_module_from_wrapper_ext,
    (const void *)cudart_slot7,
    (const void *)cudart_module_from_fatbin_ext,
    (const void *)cudart_launch,
};

/* ------------------------------------------------------------------------ */
/* TOOLS_RUNTIME_CALLBACK_HOOKS                                              */

/* Buffers the runtime keeps for tools; ours stay zeroed. Backed by more
 * memory than reported because public notes disagree on the size's unit
 * (bytes vs 32-bit words). */
static uint64_t hooks_buffer1[1024];
static uint64_t hooks_buffer2[14];

static void hooks_get_buffer1(void **buf, size_t *size)
{
    if (buf) *buf = hooks_buffer1;
    if (size) *size = 1024;
    if (fc_trace_enabled()) fc_trace_call(__func__, CUDA_SUCCESS, "\"size\":%d", 1024);
}

static void hooks_get_buffer2(void **buf, size_t *size)
{
    if (buf) *buf = hooks_buffer2;
    if (size) *size = 14;
    if (fc_trace_enabled()) fc_trace_call(__func__, CUDA_SUCCESS, "\"size\":%d", 14);
}

UNKNOWN_SLOT(hooks, 1)
UNKNOWN_SLOT(hooks, 3)
UNKNOWN_SLOT(hooks, 4)
UNKNOWN_SLOT(hooks, 5)

static const void *const tools_runtime_callback_hooks[7] = {
    TABLE_SIZE(7),
    (const void *)hooks_slot1,
    (const void *)hooks_get_buffer1,
    (const void *)hooks_slot3,
    (const void *)hooks_slot4,
    (const void *)hooks_slot5,
    (const void *)hooks_get_buffer2,
};

/* ------------------------------------------------------------------------ */
/* TOOLS_TLS (NVIDIA's CUetblToolsTls): the calling thread's current context, */
/* for tools. cuBLASLt reads it to find its per-context state.              */

/* [1] as cuCtxSetCurrent (which checks initialisation and the context). */
static CUresult tools_ctx_set_current(CUcontext ctx)
{
    CUresult r = cuCtxSetCurrent(ctx);
    API_RETURN(r, "\"ctx\":%llu", ctx && fc_valid_ctx(ctx) ? ctx->id : 0ull);
}

/* [2] as cuCtxGetCurrent: NULL, and success, when none is current. */
static CUresult tools_ctx_get_current(CUcontext *pctx)
{
    CUresult r = fc_check_init();
    if (r == CUDA_SUCCESS && !pctx) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) *pctx = fc_current_ctx();
    API_RETURN(r, "\"ctx\":%llu", r == CUDA_SUCCESS && *pctx ? (*pctx)->id : 0ull);
}

static const void *const tools_tls[3] = {
    TABLE_SIZE(3),
    (const void *)tools_ctx_set_current,
    (const void *)tools_ctx_get_current,
};

/* ------------------------------------------------------------------------ */
/* CONTEXT_LOCAL_STORAGE: the runtime's per-context state. No size slot.     */

/* NULL names the calling thread's current context. */
static CUresult cls_context(CUcontext c, CUcontext *out)
{
    *out = c ? c : fc_current_ctx();
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult cls_put(CUcontext c, void *key, void *value, fc_ctx_local_dtor dtor)
{
    CUcontext ctx;
    CUresult r = cls_context(c, &ctx);
    if (r == CUDA_SUCCESS) r = fc_ctx_local_put(ctx, key, value, dtor);
    API_RETURN(r, "\"ctx\":\"%p\",\"key\":\"%p\"", (void *)ctx, key);
}

static CUresult cls_remove(CUcontext c, void *key)
{
    CUcontext ctx;
    CUresult r = cls_context(c, &ctx);
    if (r == CUDA_SUCCESS) r = fc_ctx_local_remove(ctx, key);
    API_RETURN(r, "\"ctx\":\"%p\",\"key\":\"%p\"", (void *)ctx, key);
}

/* Fails when the key is absent: the runtime calls get, then put on failure. */
static CUresult cls_get(void **value, CUcontext c, void *key)
{
    CUcontext ctx = NULL;
    CUresult r = value ? cls_context(c, &ctx) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) r = fc_ctx_local_get(value, ctx, key);
    API_ANSWER(r, "\"ctx\":\"%p\",\"key\":\"%p\"", (void *)ctx, key); /* absent is normal */
}

UNKNOWN_SLOT(cls, 3)

static const void *const context_local_storage[4] = {
    (const void *)cls_put,
    (const void *)cls_remove,
    (const void *)cls_get,
    (const void *)cls_slot3,
};

/* ------------------------------------------------------------------------ */
/* CONTEXT_WRAPPER: checks of context flags a real driver never sets here.   */

/* [2] (ctx, u32 *flags, void **): public notes say it reports 0. */
static CUresult ctxw_check(CUcontext ctx, uint32_t *flags, void **unused)
{
    (void)unused;
    if (flags) *flags = 0;
    API_RETURN(CUDA_SUCCESS, "\"ctx\":\"%p\"", (void *)ctx);
}

/* [3] called with (ptr, ptr, NULL, small int); success (0) is accepted. */
static CUresult ctxw_slot3(void *a, void *b, void *c, int d)
{
    (void)c;
    API_RETURN(CUDA_SUCCESS, "\"a\":\"%p\",\"b\":\"%p\",\"d\":%d", a, b, d);
}

UNKNOWN_SLOT(ctxw, 1)

static const void *const context_wrapper[4] = {
    TABLE_SIZE(4),
    (const void *)ctxw_slot1,
    (const void *)ctxw_check,
    (const void *)ctxw_slot3,
};

/* ------------------------------------------------------------------------ */
/* INTEGRITY_CHECK                                                           */

static CUresult integrity_check(uint32_t runtime_version, uint64_t unix_time, uint8_t out[16]);

UNKNOWN_SLOT(integrity, 2)

static const void *const integrity_table[3] = {
    TABLE_SIZE(3),
    (const void *)integrity_check,
    (const void *)integrity_slot2,
};

/* [1] The runtime computes the same digest over what it knows of this
 * process and this driver (its tables' and this function's addresses
 * included), and compares. */
static CUresult integrity_check(uint32_t runtime_version, uint64_t unix_time, uint8_t out[16])
{
    uint8_t msg[FC_INTEGRITY_HEADER_BYTES + FC_MAX_GPUS * FC_INTEGRITY_DEVICE_BYTES];
    size_t len = 0;

    if (!out) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"version\":%u", runtime_version);
    /* Versions ending in 0 or 1 get a constant: no message to build. */
    if (runtime_version % 10 > 1) {
        CUresult r = fc_check_init();
        if (r != CUDA_SUCCESS) API_RETURN(r, "\"version\":%u", runtime_version);
        const fc_platform *p = fc_current_platform();
        int ndev = fc_device_count();
        if (ndev > p->ngpus) ndev = p->ngpus;
        if (ndev < 0) ndev = 0;

        uint8_t uuids[FC_MAX_GPUS][16];
        uint32_t domain[FC_MAX_GPUS], bus[FC_MAX_GPUS], device[FC_MAX_GPUS];
        for (int i = 0; i < ndev; i++) {
            memcpy(uuids[i], p->gpu[i].uuid, 16);
            domain[i] = p->gpu[i].pci.domain;
            bus[i] = p->gpu[i].pci.bus;
            device[i] = p->gpu[i].pci.device;
        }
        /* pthread_self() truncated to 32 bits, not gettid(): what the
         * runtime hashes. */
        len = fc_integrity_message(msg, sizeof msg, (uint32_t)p->driver_version, runtime_version,
                                   (uint32_t)getpid(), (uint32_t)(uintptr_t)pthread_self(),
                                   (uintptr_t)cudart_interface, (uintptr_t)integrity_table,
                                   (uintptr_t)integrity_check, unix_time, ndev,
                                   (const uint8_t (*)[16])uuids, domain, bus, device);
    }
    fc_integrity_digest(runtime_version, msg, len, out);
    API_RETURN(CUDA_SUCCESS, "\"version\":%u,\"time\":%llu", runtime_version,
               (unsigned long long)unix_time);
}

/* ------------------------------------------------------------------------ */
/* CONTEXT_IDENTITY (NVIDIA's CUetblToolsContext): context queries for tools. */
/* The runtime only checks that the table exists; cuBLASLt keys its         */
/* per-context state by [4]. The real driver serves 94 slots; the others    */
/* fail cleanly.                                                            */

UNKNOWN_SLOT(ctxid, 0)

/* A context handed to a tools slot must be a live one; NULL is not "current". */
static CUresult tools_ctx_check(CUcontext ctx)
{
    CUresult r = fc_check_init();
    if (r == CUDA_SUCCESS && !fc_valid_ctx(ctx)) r = CUDA_ERROR_INVALID_CONTEXT;
    return r;
}

/* [3] the ordinal of the context's device. */
static CUresult tools_ctx_get_device(CUcontext ctx, uint32_t *device)
{
    CUresult r = tools_ctx_check(ctx);
    if (r == CUDA_SUCCESS && !device) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) *device = (uint32_t)ctx->device;
    API_RETURN(r, "\"dev\":%d", r == CUDA_SUCCESS ? (int)*device : -1);
}

/* [4] the context's unique id, as cuCtxGetId. */
static CUresult tools_ctx_get_id(CUcontext ctx, uint64_t *id)
{
    CUresult r = tools_ctx_check(ctx);
    if (r == CUDA_SUCCESS && !id) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) *id = ctx->id;
    API_RETURN(r, "\"id\":%llu", r == CUDA_SUCCESS ? (unsigned long long)*id : 0ull);
}

#define CTXID_ENTRIES 95
static const void *ctxid_table[CTXID_ENTRIES];

/* A table whose slots answer `unknown` but for those set after: its size first. */
static void fill_table(const void **table, int entries, const void *unknown)
{
    table[0] = TABLE_SIZE(entries);
    for (int i = 1; i < entries; i++) table[i] = unknown;
}

__attribute__((constructor)) static void ctxid_fill(void)
{
    fill_table(ctxid_table, CTXID_ENTRIES, (const void *)ctxid_slot0);
    ctxid_table[3] = (const void *)tools_ctx_get_device;
    ctxid_table[4] = (const void *)tools_ctx_get_id;
}

/* ------------------------------------------------------------------------ */
/* CLUSTER_PROTOTYPE (NVIDIA's CUetblClusterPrototype): thread-block cluster */
/* queries. cuBLASLt asks for it when planning clustered kernels and calls  */
/* its slots without checking that the lookup succeeded, so it must exist. */

UNKNOWN_SLOT(cluster, 0)

/* [4] (uint8_t **vgpc, uint8_t **mtpc): the TPC -> GPC layout of the chip,
 * which the GPU model does not describe. cuBLASLt treats a failure as "layout
 * unknown" and falls back to what cuOccupancyMaxActiveClusters reports. */
static CUresult cluster_tpc_mapping(unsigned char **vgpc, unsigned char **mtpc)
{
    if (vgpc) *vgpc = NULL;
    if (mtpc) *mtpc = NULL;
    API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "");
}

/* [8] (dev, int *supported): as CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH. */
static CUresult cluster_launch_supported(CUdevice dev, int *supported)
{
    CUresult r = fc_check_init();
    if (r == CUDA_SUCCESS && !supported) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && !fc_valid_device(dev)) r = CUDA_ERROR_INVALID_DEVICE;
    if (r == CUDA_SUCCESS) {
        bool known;
        *supported = fc_device_attribute(dev, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, &known);
    }
    API_RETURN(r, "\"dev\":%d,\"supported\":%d", (int)dev, r == CUDA_SUCCESS ? *supported : 0);
}

#define CLUSTER_ENTRIES 17
static const void *cluster_table[CLUSTER_ENTRIES];

__attribute__((constructor)) static void cluster_fill(void)
{
    fill_table(cluster_table, CLUSTER_ENTRIES, (const void *)cluster_slot0);
    cluster_table[4] = (const void *)cluster_tpc_mapping;
    cluster_table[8] = (const void *)cluster_launch_supported;
}

/* ------------------------------------------------------------------------ */
/* Lookup                                                                    */

typedef struct {
    const char *name;
    uint8_t uuid[16];
    const void *table; /* NULL: known, not provided */
} export_table;

static const export_table export_tables[] = {
    {"CUDART_INTERFACE",
     {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9},
     cudart_interface},
    {"TOOLS_RUNTIME_CALLBACK_HOOKS",
     {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66},
     tools_runtime_callback_hooks},
    {"TOOLS_TLS",
     {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc},
     tools_tls},
    {"CONTEXT_LOCAL_STORAGE",
     {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93},
     context_local_storage},
    {"CONTEXT_WRAPPER",
     {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e},
     context_wrapper},
    {"INTEGRITY_CHECK",
     {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},
     integrity_table},
    {"CONTEXT_IDENTITY",
     {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2},
     ctxid_table},
    {"CLUSTER_PROTOTYPE",
     {0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca},
     cluster_table},
    /* Known but not provided; the runtimes seen start without them. */
    {"(unnamed, first requested)",
     {0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9},
     NULL},
    {"CTX_CREATE_BYPASS",
     {0x0c, 0xa5, 0x0b, 0x8c, 0x10, 0x04, 0x92, 0x9a, 0x89, 0xa7, 0xd0, 0xdf, 0x10, 0xe7, 0x72, 0x86},
     NULL},
    {"HEAP_ACCESS",
     {0x19, 0x5b, 0xcb, 0xf4, 0xd6, 0x7d, 0x02, 0x4a, 0xac, 0xc5, 0x1d, 0x29, 0xce, 0xa6, 0x31, 0xae},
     NULL},
    {"DEVICE_EXTENDED_RT",
     {0xb1, 0x05, 0x41, 0xe1, 0xf7, 0xc7, 0xc7, 0x4a, 0x9f, 0x64, 0xf2, 0x23, 0xbe, 0x99, 0xf1, 0xe2},
     NULL},
};

FC_API CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"table\":\"%p\"", (const void *)pExportTableId);

    /* No cuInit needed: the tables are static and the runtime may ask first. */
    const char *name = "unknown";
    for (size_t i = 0; i < sizeof export_tables / sizeof export_tables[0]; i++) {
        const export_table *t = &export_tables[i];
        if (memcmp(t->uuid, pExportTableId->bytes, 16) != 0) continue;
        if (t->table) {
            *ppExportTable = t->table;
            API_RETURN(CUDA_SUCCESS, "\"table\":\"%s\"", t->name);
        }
        name = t->name;
        break;
    }

    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)pExportTableId->bytes[i]);
    *ppExportTable = NULL;
    if (strcmp(name, "unknown") != 0) /* known, and runtimes start without it */
        API_ANSWER(CUDA_ERROR_INVALID_VALUE, "\"table\":\"%s\",\"name\":\"%s\"", hex, name);
    API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"table\":\"%s\",\"name\":\"%s\"", hex, name);
}
