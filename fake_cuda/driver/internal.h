/* Shared state and helpers of the simulated CUDA driver (libcuda.so.1). */
#ifndef NCCLSIM_DRIVER_INTERNAL_H
#define NCCLSIM_DRIVER_INTERNAL_H

#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "device_link.h" /* what NCCL's device emulation calls, and the hook it provides */
#include "log.h"
#include "platform.h"
#include "trace.h"

#define FC_API __attribute__((visibility("default")))

/* Every public entry point returns through this: one trace record per call
 * (NCCLSIM_TRACE) and a log line for failures (NCCLSIM_LOG>=2). The format
 * describes the key arguments. */
#define API_RETURN(res, ...)                                                   \
    do {                                                                       \
        CUresult api_r_ = (res);                                               \
        if (fc_trace_enabled() || (api_r_ != CUDA_SUCCESS && fc_log_level() >= FC_LOG_INFO)) \
            fc_trace_call(__func__, (int)api_r_, __VA_ARGS__);                 \
        return api_r_;                                                         \
    } while (0)

/* For answers that are expected and not failures although non-zero
 * (NOT_READY, NOT_FOUND of an optional symbol, an absent key): traced, but
 * logged only at NCCLSIM_LOG=3. */
#define API_ANSWER(res, ...)                                                   \
    do {                                                                       \
        CUresult api_r_ = (res);                                               \
        if (fc_trace_enabled() || fc_log_level() >= FC_LOG_DEBUG)              \
            fc_trace_answer(__func__, (int)api_r_, __VA_ARGS__);               \
        return api_r_;                                                         \
    } while (0)

/* CUDA 13's entry points, which the 12.x cuda.h this builds with does not declare. */
CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx);
CUresult cuCtxSynchronize_v2(CUcontext ctx);

/* Checks shared by most entry points. */
#define REQUIRE_INIT()                                                         \
    do {                                                                       \
        CUresult init_r_ = fc_check_init();                                    \
        if (init_r_ != CUDA_SUCCESS) API_RETURN(init_r_, "");                  \
    } while (0)

/* ---- init.c ---- */
CUresult fc_check_init(void);       /* NOT_INITIALIZED before cuInit */
const fc_platform *fc_current_platform(void); /* valid after a successful cuInit */
int fc_device_count(void);
bool fc_valid_device(CUdevice d);

/* ---- device_attributes.c ---- */
int fc_device_attribute(CUdevice dev, int attr, bool *known);

/* ---- contexts.c ---- */
struct fc_ctx_local; /* context-local storage entry (export table) */
struct CUctx_st {
    uint32_t magic;
    CUdevice device;
    bool primary;
    unsigned flags;
    atomic_int refcount; /* primary: retain count; created: 1 */
    pthread_mutex_t lock;
    struct fc_ctx_local *locals;
    struct CUstream_st *legacy_stream; /* the NULL stream of this context */
    size_t limits[16];
    unsigned long long id;
};
#define FC_CTX_MAGIC 0x63747821u

CUresult fc_primary_ctx_retain(CUdevice dev, CUcontext *out);

/* Context-local storage for the runtime's CONTEXT_LOCAL_STORAGE export table. */
typedef void (*fc_ctx_local_dtor)(CUcontext, void *key, void *value);
CUresult fc_ctx_local_put(CUcontext c, void *key, void *value, fc_ctx_local_dtor dtor);
CUresult fc_ctx_local_remove(CUcontext c, void *key);
CUresult fc_ctx_local_get(void **value, CUcontext c, void *key);

/* ---- current_context.c: the calling thread's stack of current contexts ---- */
#define FC_CTX_STACK_MAX 64
CUcontext fc_current_ctx(void);           /* NULL when none */
CUresult fc_ctx_current_checked(CUcontext *out); /* INVALID_CONTEXT when none */
bool fc_valid_ctx(CUcontext c);
void fc_ctx_set_current(CUcontext ctx);   /* replaces the top; NULL pops it */
bool fc_ctx_push(CUcontext ctx);          /* false: the stack is full */
bool fc_ctx_pop(CUcontext *out);          /* false: the stack is empty */
void fc_ctx_forget(CUcontext ctx);        /* drop a destroyed context from the stack */

/* ---- memory.c: every range of simulated memory, by address (fc_sim_memory_span:
 * device_link.h) ---- */
typedef enum {
    FC_MEM_DEVICE = 1,     /* cuMemAlloc, pools */
    FC_MEM_HOST_ALLOC,     /* cuMemHostAlloc / cuMemAllocHost */
    FC_MEM_HOST_REGISTERED,/* cuMemHostRegister */
    FC_MEM_MANAGED,        /* cuMemAllocManaged */
    FC_MEM_VMM_MAPPED,     /* cuMemMap of a cuMemCreate'd or imported handle */
    FC_MEM_IPC_MAPPED,     /* cuIpcOpenMemHandle of another process's memory */
    FC_MEM_MULTICAST,      /* cuMemMap of a multicast object: address space without pages */
} fc_mem_kind;

typedef struct fc_alloc {
    uintptr_t base;
    size_t size;
    fc_mem_kind kind;
    CUdevice device;   /* owning device; for host memory the one current at allocation */
    int fd;            /* memfd backing it, -1 when none (registered host memory, multicast);
                        * for a VMM mapping the handle's, which the mapping keeps open */
    unsigned flags;    /* host alloc flags */
    void *handle;      /* VMM: the fc_vmm_handle mapped here */
    size_t offset;     /* VMM: where the mapping starts in the handle's memory */
    unsigned long long buffer_id;
    bool counted;      /* counts against its device's capacity */
    CUmemoryPool pool; /* allocated from this pool (cuMemAllocFromPoolAsync) */
    /* Set by fc_registry_add from the memfd (see fc_sim_memory_where): its
     * inode, the same in every process that maps it, and whose memory it is. */
    uint64_t ino;
    int home;
} fc_alloc;

/* Create a memfd of `size` bytes mapped shared at an address of our choice
 * (or at `fixed` when non-zero). Untouched pages cost no memory. Memfd names
 * end in "-d<N>" for device N's memory (any other: host memory), so that
 * every process that maps one knows whose memory it is. */
int fc_memfd_map(size_t size, uintptr_t fixed, const char *name, int *fd_out, void **addr_out);
void fc_registry_add(const fc_alloc *a);
bool fc_registry_find(uintptr_t addr, fc_alloc *out); /* range containing addr */
bool fc_registry_remove(uintptr_t base, fc_alloc *out);
/* Memory went away or moved: moves fc_sim_memory_generation (device_link.h). */
void fc_sim_memory_changed(void);
/* Any registered range overlapping [base, base+size)? */
bool fc_registry_overlaps(uintptr_t base, size_t size);
/* The memfd behind [addr, addr+len) and the offset of addr in it, when the
 * whole range is in one allocation backed by one (false otherwise). */
bool fc_backing_fd(uintptr_t addr, size_t len, int *fd, size_t *offset);
/* zero_source.c: the stand-ins' reserved zeros (fc_zero_stand_in), as
 * references name them: addr's offset in them (false: not in them), and
 * `len` bytes at an offset (NULL: past them). */
bool fc_zero_offset(uintptr_t addr, uint64_t *offset);
const void *fc_zero_at(uint64_t offset, size_t len);
/* memory_refs.c: descriptor `fd` of process `pid` (a memfd it shares),
 * opened in this process through /proc/<pid>/fd with open()'s `flags`;
 * -1 with errno set when it cannot be. */
int fc_peer_fd_open(int32_t pid, int32_t fd, int flags);
/* The boards' key of byte `off` of the memfd with inode `ino` (0: none fits). */
uint64_t fc_memory_key(uint64_t ino, uint64_t off);
/* Inodes of files other than memfds (registered host memory) are named
 * ino | FC_FILE_INODES (above any inode number). */
#define FC_FILE_INODES (1ull << 62)
/* Device capacity accounting: false (and nothing reserved) when it does not fit. */
bool fc_mem_reserve(CUdevice dev, size_t size);
void fc_mem_mark_in_use(CUdevice dev); /* a context there: NVML lists this process */
void fc_mem_unreserve(CUdevice dev, size_t size);
size_t fc_mem_used(CUdevice dev);
CUresult fc_device_alloc(CUdevice dev, size_t size, CUdeviceptr *out);
CUresult fc_device_free(CUdeviceptr p);

/* ---- streams.c: ordered queues with one worker thread each (fc_stream_enqueue,
 * fc_stream_id: device_link.h) ---- */
struct CUstream_st {
    uint32_t magic;
    CUcontext ctx;
    unsigned flags;
    int priority;
    unsigned long long id;
    pthread_mutex_t lock;
    pthread_cond_t work; /* the worker waits here for an operation it can run */
    pthread_cond_t done; /* synchronising and blocked submitting threads wait here */
    struct fc_op *head, *tail;
    uint64_t enqueued, completed; /* ops */
    uint64_t modelled_done;       /* modelled time the last completed op ended (modelled_time.c) */
    bool worker_running;
    pthread_t worker;
};
#define FC_STREAM_MAGIC 0x7374726du

/* Resolve a handle (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a stream);
 * `ptds` = called through a per-thread-default-stream entry point. */
CUresult fc_stream_resolve(CUstream h, bool ptds, struct CUstream_st **out);
struct CUstream_st *fc_stream_new(CUcontext ctx, unsigned flags, int priority);
void fc_stream_free(struct CUstream_st *s); /* waits for its work */
void fc_stream_wait_idle(struct CUstream_st *s);
/* A query from `caller` (a return address): may wait a little (query_backoff.c). */
bool fc_stream_idle(struct CUstream_st *s, const void *caller);
void fc_ctx_synchronize(CUcontext ctx); /* every stream of the context */
/* An operation that waits for another stream (an event) and takes no time
 * once it can run: `ready` says whether it can, and when not, arranges that
 * fc_stream_unpark(s) is called once it can (NULL: it can). Such operations
 * and the quick ones after them run on the thread that makes them ready
 * (the one completing the event): a stream whose next operations only wait
 * for and record events needs no thread switch. */
typedef bool (*fc_op_ready_fn)(void *arg, struct CUstream_st *s);
bool fc_stream_enqueue_quick(struct CUstream_st *s, fc_op_fn fn, const void *arg, size_t arg_size,
                             fc_op_ready_fn ready);
void fc_stream_unpark(struct CUstream_st *s);

/* ---- query_backoff.c ---- */
/* A query's answer `done` to `caller` (a return address): false when the
 * query should answer at once; true when it should first wait for the work
 * until `until` (CLOCK_MONOTONIC). */
bool fc_query_wait(bool done, const void *caller, struct timespec *until);

/* ---- events.c ---- */
struct CUevent_st {
    uint32_t magic;
    unsigned flags;
    CUcontext ctx;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t recorded;  /* records issued */
    uint64_t completed; /* records that reached their point in the stream */
    uint64_t time_ns;   /* when the latest completed record completed */
    uint64_t modelled_ns; /* the same in modelled time (NCCLSIM_CLOCK=model) */
    struct CUstream_st **parked; /* streams whose next operation waits for it */
    int nparked, parked_cap;
};
#define FC_EVENT_MAGIC 0x65766e74u

/* ---- modules.c (fc_function_name: device_link.h) ---- */
bool fc_valid_function(CUfunction f);
int fc_function_attr(CUfunction f, CUfunction_attribute a);

/* ---- occupancy.c ---- */
/* A launch's cluster shape (config attribute or the function's required
 * one): INVALID_CLUSTER_SIZE when empty, too large, not the required shape,
 * or not dividing the grid. */
CUresult fc_launch_cluster_check(CUfunction f, const CUlaunchConfig *c);

/* ---- util ---- */
uint64_t fc_now_ns(void);

/* ---- modelled_time.c (the operations' side: device_link.h) ---- */
/* The program's modelled clock: now, a host cost of `us` (charged by API
 * calls), a wait that ended at modelled time t. Inert when time is real. */
uint64_t fc_time_host_now(void);
void fc_time_host_charge(double us);
void fc_time_host_reach(uint64_t t);
/* Stream operations submitted (+1) and finished (-1): while some are, the
 * program's clock reads cost nothing (it is waiting for them). */
void fc_time_gpu_work(long delta);
/* Streams: around each operation, from the stream's and the submission's
 * modelled times; finish gives when the operation ended. An operation may
 * run another stream's inside it: begin returns what finish restores. */
typedef struct {
    uint64_t stream_done, submit, end;
} fc_time_op_state;
fc_time_op_state fc_time_op_begin(uint64_t stream_done, uint64_t submit);
uint64_t fc_time_op_finish(fc_time_op_state outer);
/* Inside a copy operation: the transfer's modelled duration. */
void fc_time_copy(const void *dst, const void *src, size_t bytes);
unsigned long long fc_next_id(void);

#endif
