/* Streams are real ordered queues: each has a worker thread (started on
 * first need) that runs its operations one after another. An operation that
 * cannot block runs in the caller when the stream is idle, which keeps the
 * common case (copies, event records on an idle stream) cheap. A stream
 * whose next operation waits for an event is parked: the thread completing
 * the event runs that wait and the quick operations after it (NCCL's
 * per-collective hand-off between its streams then costs no thread switch),
 * and wakes the worker only for real work. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "idle.h"
#include "internal.h"
#include "timing.h"

/* A GPU's work queue is finite: a host thread that submits faster than the
 * GPU completes blocks in the launch once about a thousand operations are
 * pending (the depth is not documented; a thousand is the order seen on
 * NVIDIA GPUs). Without a bound, a program that enqueues in a loop without
 * synchronising holds every queued operation in memory. The operations
 * ahead of a blocked submission were all submitted before it, so waiting
 * for them cannot wait for the blocked thread. */
#define STREAM_QUEUE_DEPTH 1024
/* A blocked submission goes on once this many slots are free: waking the
 * submitting thread for every slot would cost two thread switches per
 * operation. Its modelled time is still that of the first free slot. */
#define STREAM_QUEUE_REFILL (STREAM_QUEUE_DEPTH / 4)

struct fc_op {
    fc_op_fn fn;
    fc_op_ready_fn ready; /* NULL: ready when it reaches the head */
    bool quick;           /* takes no time, cannot block: any thread may run it */
    struct fc_op *next;
    uint64_t submit;   /* modelled time the host submitted it */
    size_t room;       /* bytes arg has room for */
    max_align_t arg[]; /* copy of the caller's argument */
};

/* Operations run are kept for the stream's next ones (up to SPARE_OPS: the
 * host may enqueue many while the worker drains) rather than freed: made on
 * the host's thread and freed on the worker's, each went through the
 * allocator's cross-thread path. */
#define SPARE_OPS 64
#define SPARE_ARG_BYTES 128 /* the room each has, at least */

/* Run one operation and move the stream's modelled timeline past it. Only
 * the operation running (one at a time) touches modelled_done. */
static void run_op(struct CUstream_st *s, fc_op_fn fn, void *arg, uint64_t submit)
{
    fc_time_op_state outer = fc_time_op_begin(s->modelled_done, submit);
    fn(arg);
    s->modelled_done = fc_time_op_finish(outer);
}

struct stream_ext { /* state private to this file */
    struct CUstream_st s;
    bool busy;      /* an operation is running (worker or inline) */
    bool destroyed; /* handle released: the worker exits once drained */
    bool parked;    /* the head waits for an event (fc_stream_unpark) */
    /* Synchronising threads wait until `completed` reaches wake_at (the least
     * of their targets; UINT64_MAX: none waits): a stream of many small
     * operations wakes them once, not per operation. */
    int syncing;
    uint64_t wake_at;
    /* Modelled finish of the last STREAM_QUEUE_DEPTH operations, by
     * completion count (modelled time only): a slot frees at its
     * operation's modelled finish, however early the emulation got there. */
    uint64_t *done_at;
    struct fc_op *spares; /* operations run, for the next (SPARE_OPS at most) */
    int nspares;
};

static struct stream_ext *ext(struct CUstream_st *s) { return (struct stream_ext *)s; }

/* Whom a change of a stream's state concerns. They are woken after the
 * stream's lock is released: a thread woken while the waker holds it only
 * blocks on the lock, two more thread switches per wake. */
enum { WAKE_WORKER = 1, WAKE_WAITERS = 2 };

static void wake(struct CUstream_st *s, int whom)
{
    if (whom & WAKE_WORKER) pthread_cond_signal(&s->work);
    if (whom & WAKE_WAITERS) pthread_cond_broadcast(&s->done);
}

/* With s locked, after an operation: its stream's progress, and one op less
 * in flight; returns whom to wake. `inline_op`: the caller ran it, and the
 * worker may wait for it to end. */
static int op_done(struct CUstream_st *s, bool inline_op)
{
    s->completed++;
    if (ext(s)->done_at) ext(s)->done_at[(s->completed - 1) % STREAM_QUEUE_DEPTH] = s->modelled_done;
    fc_time_gpu_work(-1);
    return (inline_op ? WAKE_WORKER : 0) | (s->completed >= ext(s)->wake_at ? WAKE_WAITERS : 0);
}

static struct fc_op *pop(struct CUstream_st *s)
{
    struct fc_op *op = s->head;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    return op;
}

/* With s locked and its head ready: run the head (unlocked meanwhile). */
static void run_head(struct CUstream_st *s)
{
    struct stream_ext *e = ext(s);
    struct fc_op *op = pop(s);
    e->busy = true;
    pthread_mutex_unlock(&s->lock);
    run_op(s, op->fn, op->arg, op->submit);
    pthread_mutex_lock(&s->lock);
    e->busy = false;
    if (e->nspares < SPARE_OPS && !e->destroyed) { /* a destroyed stream's worker frees its spares as it ends */
        op->next = e->spares;
        e->spares = op;
        e->nspares++;
        op = NULL;
    }
    if (op) {
        pthread_mutex_unlock(&s->lock);
        free(op);
        pthread_mutex_lock(&s->lock);
    }
}

/* With s locked: whether its head can run now; if not, the head's ready
 * function arranged an unpark and the stream is parked. */
static bool head_ready(struct CUstream_st *s)
{
    struct fc_op *op = s->head;
    if (!op->ready || op->ready(op->arg, s)) return true;
    ext(s)->parked = true;
    return false;
}

void fc_stream_unpark(struct CUstream_st *s)
{
    struct stream_ext *e = ext(s);
    int whom = 0;
    pthread_mutex_lock(&s->lock);
    e->parked = false;
    while (s->head && s->head->quick && !e->busy && head_ready(s)) {
        run_head(s);
        whom |= op_done(s, false);
    }
    /* the worker: for real work, or to run what its own operation unparked */
    if (s->head && !e->parked && !e->busy) whom |= WAKE_WORKER;
    pthread_mutex_unlock(&s->lock);
    wake(s, whom);
}

/* Every stream ever created, for context-wide synchronisation. Stream
 * structures are never freed, so a handle used after destroy fails its magic
 * check instead of touching freed memory. */
static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st **all;
static size_t all_n, all_cap;

struct CUstream_st *fc_stream_new(CUcontext ctx, unsigned flags, int priority)
{
    struct stream_ext *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->wake_at = UINT64_MAX;
    if (fc_time_modelled() && !(e->done_at = calloc(STREAM_QUEUE_DEPTH, sizeof *e->done_at))) {
        free(e);
        return NULL;
    }
    struct CUstream_st *s = &e->s;
    s->magic = FC_STREAM_MAGIC;
    s->ctx = ctx;
    s->flags = flags;
    s->priority = priority;
    s->id = fc_next_id();
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->done, NULL);
    pthread_mutex_lock(&all_lock);
    if (all_n == all_cap) {
        size_t cap = all_cap ? all_cap * 2 : 64;
        struct CUstream_st **n = realloc(all, cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&all_lock);
            free(e->done_at);
            free(e);
            return NULL;
        }
        all = n;
        all_cap = cap;
    }
    all[all_n++] = s;
    pthread_mutex_unlock(&all_lock);
    return s;
}

static void *worker_main(void *arg)
{
    struct CUstream_st *s = arg;
    struct stream_ext *e = ext(s);
    pthread_setname_np(pthread_self(), "ncclsim stream"); /* in top, perf, gdb */
    fc_thread_device(s->ctx->device); /* the GPU's work runs here: its nudges concern its device */
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while ((!s->head || e->busy || e->parked) && !(e->destroyed && !s->head))
            pthread_cond_wait(&s->work, &s->lock);
        if (!s->head) break; /* destroyed and drained */
        if (!head_ready(s)) continue;
        run_head(s);
        int whom = op_done(s, false);
        if (whom) {
            pthread_mutex_unlock(&s->lock);
            wake(s, whom);
            pthread_mutex_lock(&s->lock);
        }
    }
    s->worker_running = false;
    struct fc_op *spares = e->spares;
    e->spares = NULL;
    e->nspares = 0;
    pthread_mutex_unlock(&s->lock);
    while (spares) {
        struct fc_op *next = spares->next;
        free(spares);
        spares = next;
    }
    return NULL;
}

/* With s locked: wait until the stream has completed `target` operations,
 * or until `until` (CLOCK_MONOTONIC; NULL: no limit). */
static void wait_completed(struct CUstream_st *s, uint64_t target, const struct timespec *until)
{
    struct stream_ext *e = ext(s);
    if (s->completed >= target) return;
    e->syncing++;
    if (target < e->wake_at) e->wake_at = target;
    while (s->completed < target) {
        if (!until) pthread_cond_wait(&s->done, &s->lock);
        else if (pthread_cond_clockwait(&s->done, &s->lock, CLOCK_MONOTONIC, until) == ETIMEDOUT) break;
    }
    if (--e->syncing == 0) e->wake_at = UINT64_MAX;
}

/* With s locked, before the next submission: the operation that must have
 * completed to free a slot for it, waited for if it has not; its modelled
 * finish, which the host reaches (0: none to wait for, or not recorded). */
static uint64_t queue_slot(struct CUstream_st *s)
{
    struct stream_ext *e = ext(s);
    if (s->enqueued < STREAM_QUEUE_DEPTH) return 0;
    uint64_t first = s->enqueued - STREAM_QUEUE_DEPTH + 1; /* counted from 1 */
    if (s->completed < first) wait_completed(s, first + STREAM_QUEUE_REFILL - 1, NULL);
    /* (another submitter woken with this one may have let the record move on) */
    bool kept = e->done_at && s->completed - first < STREAM_QUEUE_DEPTH;
    return kept ? e->done_at[(first - 1) % STREAM_QUEUE_DEPTH] : 0;
}

static bool enqueue(struct CUstream_st *s, fc_op_fn fn, const void *arg, size_t arg_size, bool inline_ok,
                    bool quick, fc_op_ready_fn ready)
{
    struct stream_ext *e = ext(s);
    /* every stream call costs the host this much (a launch more: launch.c) */
    fc_time_host_charge(fc_timing.host_call_us);
    uint64_t submit = fc_time_host_now();
    fc_time_gpu_work(+1);
    pthread_mutex_lock(&s->lock);
    uint64_t slot_free = queue_slot(s);
    if (slot_free) { /* the host waited until a slot was free */
        pthread_mutex_unlock(&s->lock);
        fc_time_host_reach(slot_free);
        submit = fc_time_host_now();
        pthread_mutex_lock(&s->lock);
    }
    if (inline_ok && !s->head && !e->busy) {
        e->busy = true;
        s->enqueued++;
        pthread_mutex_unlock(&s->lock);
        run_op(s, fn, (void *)arg, submit);
        pthread_mutex_lock(&s->lock);
        e->busy = false;
        int whom = op_done(s, true);
        pthread_mutex_unlock(&s->lock);
        wake(s, whom);
        return true;
    }
    struct fc_op *op = e->spares;
    if (op && op->room >= arg_size) {
        e->spares = op->next;
        e->nspares--;
    } else {
        op = NULL;
    }
    pthread_mutex_unlock(&s->lock);

    if (!op) {
        size_t room = arg_size > SPARE_ARG_BYTES ? arg_size : SPARE_ARG_BYTES;
        if (!(op = malloc(sizeof *op + room))) {
            fc_time_gpu_work(-1);
            return false;
        }
        op->room = room;
    }
    op->fn = fn;
    op->ready = ready;
    op->quick = quick;
    op->next = NULL;
    op->submit = submit;
    memcpy(op->arg, arg, arg_size);

    pthread_mutex_lock(&s->lock);
    if (s->tail) s->tail->next = op;
    else s->head = op;
    s->tail = op;
    s->enqueued++;
    /* The worker waits for this op only when it is the next to run: behind
     * others, whoever ends or unparks those wakes it (a needless wake costs
     * two thread switches). */
    bool next = s->head == op && !e->busy && !e->parked;
    if (!s->worker_running) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        if (pthread_create(&s->worker, &attr, worker_main, s) == 0) s->worker_running = true;
        pthread_attr_destroy(&attr);
        if (!s->worker_running) abort(); /* a stream that never runs would hang the program */
    }
    pthread_mutex_unlock(&s->lock);
    if (next) wake(s, WAKE_WORKER);
    return true;
}

bool fc_stream_enqueue(struct CUstream_st *s, fc_op_fn fn, const void *arg, size_t arg_size,
                       bool inline_ok)
{
    return enqueue(s, fn, arg, arg_size, inline_ok, false, NULL);
}

bool fc_stream_enqueue_quick(struct CUstream_st *s, fc_op_fn fn, const void *arg, size_t arg_size,
                             fc_op_ready_fn ready)
{
    return enqueue(s, fn, arg, arg_size, !ready, true, ready);
}

void fc_stream_wait_idle(struct CUstream_st *s)
{
    pthread_mutex_lock(&s->lock);
    wait_completed(s, s->enqueued, NULL);
    uint64_t done = s->modelled_done;
    pthread_mutex_unlock(&s->lock);
    fc_time_host_reach(done); /* the host waited until then */
}

unsigned long long fc_stream_id(const struct CUstream_st *s) { return s->id; }

int fc_stream_device(const struct CUstream_st *s) { return s->ctx->device; }

bool fc_stream_idle(struct CUstream_st *s, const void *caller)
{
    pthread_mutex_lock(&s->lock);
    uint64_t target = s->enqueued;
    bool idle = s->completed == target;
    struct timespec until;
    if (fc_query_wait(idle, caller, &until)) {
        wait_completed(s, target, &until);
        idle = s->completed >= target;
        if (idle) fc_query_wait(true, caller, NULL);
    }
    uint64_t done = s->modelled_done;
    pthread_mutex_unlock(&s->lock);
    /* A query that finds the work done happened after it; one that does not
     * costs no modelled time, however often the program asks. */
    if (idle) fc_time_host_reach(done);
    return idle;
}

void fc_stream_free(struct CUstream_st *s)
{
    pthread_mutex_lock(&s->lock);
    s->magic = 0;
    ext(s)->destroyed = true; /* queued work still runs, as CUDA specifies */
    pthread_mutex_unlock(&s->lock);
    wake(s, WAKE_WORKER);
}

void fc_ctx_synchronize(CUcontext ctx)
{
    pthread_mutex_lock(&all_lock);
    size_t n = all_n;
    struct CUstream_st **snap = malloc(n * sizeof *snap);
    if (snap) memcpy(snap, all, n * sizeof *snap);
    pthread_mutex_unlock(&all_lock);
    if (!snap) return;
    for (size_t i = 0; i < n; i++)
        if (snap[i]->ctx == ctx) fc_stream_wait_idle(snap[i]);
    free(snap);
}

/* ---- handles ---- */

static pthread_mutex_t legacy_lock = PTHREAD_MUTEX_INITIALIZER;
#define PTS_MAX 16
static __thread struct {
    CUcontext ctx;
    struct CUstream_st *s;
} per_thread[PTS_MAX];

static CUresult legacy_stream(CUcontext c, struct CUstream_st **out)
{
    pthread_mutex_lock(&legacy_lock);
    if (!c->legacy_stream) c->legacy_stream = fc_stream_new(c, 0, 0);
    *out = c->legacy_stream;
    pthread_mutex_unlock(&legacy_lock);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult per_thread_stream(CUcontext c, struct CUstream_st **out)
{
    for (int i = 0; i < PTS_MAX; i++) {
        if (per_thread[i].ctx == c) {
            *out = per_thread[i].s;
            return CUDA_SUCCESS;
        }
        if (!per_thread[i].ctx) {
            struct CUstream_st *s = fc_stream_new(c, 0, 0);
            if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
            per_thread[i].ctx = c;
            per_thread[i].s = s;
            *out = s;
            return CUDA_SUCCESS;
        }
    }
    return legacy_stream(c, out); /* more contexts than slots: share the legacy one */
}

CUresult fc_stream_resolve(CUstream h, bool ptds, struct CUstream_st **out)
{
    if (h && h != CU_STREAM_LEGACY && h != CU_STREAM_PER_THREAD) {
        if (h->magic != FC_STREAM_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
        *out = h;
        return CUDA_SUCCESS;
    }
    CUcontext c;
    CUresult r = fc_ctx_current_checked(&c);
    if (r != CUDA_SUCCESS) return r;
    if (h == CU_STREAM_PER_THREAD || (!h && ptds)) return per_thread_stream(c, out);
    return legacy_stream(c, out);
}

/* ---- stream API ---- */

static CUresult stream_create(CUstream *ph, unsigned flags, int priority)
{
    CUcontext c;
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fc_ctx_current_checked(&c);
    if (r != CUDA_SUCCESS) return r;
    if (priority > 0) priority = 0;
    if (priority < -5) priority = -5;
    *ph = fc_stream_new(c, flags, priority);
    return *ph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FC_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    REQUIRE_INIT();
    CUresult r = stream_create(phStream, Flags, 0);
    API_RETURN(r, "\"flags\":%u,\"stream\":%llu", Flags, r ? 0ull : (*phStream)->id);
}

FC_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    REQUIRE_INIT();
    CUresult r = stream_create(phStream, flags, priority);
    API_RETURN(r, "\"flags\":%u,\"priority\":%d,\"stream\":%llu", flags, priority,
               r ? 0ull : (*phStream)->id);
}

FC_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    REQUIRE_INIT();
    if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
        hStream->magic != FC_STREAM_MAGIC)
        API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    unsigned long long id = hStream->id;
    fc_stream_free(hStream);
    API_RETURN(CUDA_SUCCESS, "\"stream\":%llu", id);
}

FC_API CUresult cuStreamDestroy(CUstream hStream) { return cuStreamDestroy_v2(hStream); }

#define RESOLVE(h, ptds, s)                                                        \
    struct CUstream_st *s;                                                         \
    do {                                                                           \
        CUresult rr_ = fc_stream_resolve((h), (ptds), &s);                         \
        if (rr_ != CUDA_SUCCESS) API_RETURN(rr_, "");                              \
    } while (0)

static CUresult stream_query(CUstream h, bool ptds, const void *caller)
{
    REQUIRE_INIT();
    RESOLVE(h, ptds, s);
    API_ANSWER(fc_stream_idle(s, caller) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY, "\"stream\":%llu", s->id);
}
FC_API CUresult cuStreamQuery(CUstream h) { return stream_query(h, false, __builtin_return_address(0)); }
FC_API CUresult cuStreamQuery_ptsz(CUstream h) { return stream_query(h, true, __builtin_return_address(0)); }

static CUresult stream_sync(CUstream h, bool ptds)
{
    REQUIRE_INIT();
    RESOLVE(h, ptds, s);
    fc_stream_wait_idle(s);
    API_RETURN(CUDA_SUCCESS, "\"stream\":%llu", s->id);
}
FC_API CUresult cuStreamSynchronize(CUstream h) { return stream_sync(h, false); }
FC_API CUresult cuStreamSynchronize_ptsz(CUstream h) { return stream_sync(h, true); }

/* Host functions and callbacks run on the stream's worker, in order. */
struct host_fn_op {
    CUhostFn fn;
    void *data;
};
static void run_host_fn(void *arg)
{
    struct host_fn_op *o = arg;
    o->fn(o->data);
}

static CUresult launch_host_func(CUstream h, CUhostFn fn, void *userData, bool ptds)
{
    REQUIRE_INIT();
    if (!fn) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    RESOLVE(h, ptds, s);
    struct host_fn_op o = {fn, userData};
    bool ok = fc_stream_enqueue(s, run_host_fn, &o, sizeof o, false);
    API_RETURN(ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY, "\"stream\":%llu", s->id);
}
FC_API CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *userData)
{
    return launch_host_func(h, fn, userData, false);
}
FC_API CUresult cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void *userData)
{
    return launch_host_func(h, fn, userData, true);
}

struct callback_op {
    CUstreamCallback fn;
    CUstream handle;
    void *data;
};
static void run_callback(void *arg)
{
    struct callback_op *o = arg;
    o->fn(o->handle, CUDA_SUCCESS, o->data);
}

static CUresult add_callback(CUstream h, CUstreamCallback cb, void *userData, unsigned flags, bool ptds)
{
    REQUIRE_INIT();
    if (!cb || flags) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    RESOLVE(h, ptds, s);
    struct callback_op o = {cb, h, userData};
    bool ok = fc_stream_enqueue(s, run_callback, &o, sizeof o, false);
    API_RETURN(ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY, "\"stream\":%llu", s->id);
}
FC_API CUresult cuStreamAddCallback(CUstream h, CUstreamCallback cb, void *userData, unsigned int flags)
{
    return add_callback(h, cb, userData, flags, false);
}
FC_API CUresult cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback cb, void *userData,
                                         unsigned int flags)
{
    return add_callback(h, cb, userData, flags, true);
}

/* ---- properties ---- */

static CUresult get_priority(CUstream h, int *priority, bool ptds)
{
    REQUIRE_INIT();
    if (!priority) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    RESOLVE(h, ptds, s);
    *priority = s->priority;
    API_RETURN(CUDA_SUCCESS, "\"stream\":%llu", s->id);
}
FC_API CUresult cuStreamGetPriority(CUstream h, int *p) { return get_priority(h, p, false); }
FC_API CUresult cuStreamGetPriority_ptsz(CUstream h, int *p) { return get_priority(h, p, true); }

static CUresult get_flags(CUstream h, unsigned *flags, bool ptds)
{
    REQUIRE_INIT();
    if (!flags) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    RESOLVE(h, ptds, s);
    *flags = s->flags;
    API_RETURN(CUDA_SUCCESS, "\"stream\":%llu", s->id);
}
FC_API CUresult cuStreamGetFlags(CUstream h, unsigned int *f) { return get_flags(h, f, false); }
FC_API CUresult cuStreamGetFlags_ptsz(CUstream h, unsigned int *f) { return get_flags(h, f, true); }

static CUresult get_id(CUstream h, unsigned long long *id, bool ptds)
{
    REQUIRE_INIT();
    if (!id) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    RESOLVE(h, ptds, s);
    *id = s->id;
    API_RETURN(CUDA_SUCCESS, "\"stream\":%llu", s->id);
}
FC_API CUresult cuStreamGetId(CUstream h, unsigned long long *id) { return get_id(h, id, false); }
FC_API CUresult cuStreamGetId_ptsz(CUstream h, unsigned long long *id) { return get_id(h, id, true); }

static CUresult get_ctx(CUstream h, CUcontext *pctx, bool ptds)
{
    REQUIRE_INIT();
    if (!pctx) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    RESOLVE(h, ptds, s);
    *pctx = s->ctx;
    API_RETURN(CUDA_SUCCESS, "\"stream\":%llu", s->id);
}
FC_API CUresult cuStreamGetCtx(CUstream h, CUcontext *c) { return get_ctx(h, c, false); }
FC_API CUresult cuStreamGetCtx_ptsz(CUstream h, CUcontext *c) { return get_ctx(h, c, true); }

static CUresult get_ctx_v2(CUstream h, CUcontext *pctx, CUgreenCtx *pgreen, bool ptds)
{
    if (pgreen) *pgreen = NULL; /* no green contexts here */
    return get_ctx(h, pctx, ptds);
}
FC_API CUresult cuStreamGetCtx_v2(CUstream h, CUcontext *c, CUgreenCtx *g) { return get_ctx_v2(h, c, g, false); }
FC_API CUresult cuStreamGetCtx_v2_ptsz(CUstream h, CUcontext *c, CUgreenCtx *g) { return get_ctx_v2(h, c, g, true); }

static CUresult get_device(CUstream h, CUdevice *dev, bool ptds)
{
    REQUIRE_INIT();
    if (!dev) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    RESOLVE(h, ptds, s);
    *dev = s->ctx->device;
    API_RETURN(CUDA_SUCCESS, "\"stream\":%llu", s->id);
}
FC_API CUresult cuStreamGetDevice(CUstream h, CUdevice *d) { return get_device(h, d, false); }
FC_API CUresult cuStreamGetDevice_ptsz(CUstream h, CUdevice *d) { return get_device(h, d, true); }

/* Stream attributes are scheduling hints with no effect here; they are kept
 * so that what a program sets is what it reads back. */
static CUresult get_attribute(CUstream h, CUstreamAttrID attr, CUstreamAttrValue *out, bool ptds)
{
    REQUIRE_INIT();
    if (!out) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    RESOLVE(h, ptds, s);
    memset(out, 0, sizeof *out);
    if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY) out->priority = s->priority;
    API_RETURN(CUDA_SUCCESS, "\"stream\":%llu,\"attr\":%d", s->id, attr);
}
FC_API CUresult cuStreamGetAttribute(CUstream h, CUstreamAttrID a, CUstreamAttrValue *v) { return get_attribute(h, a, v, false); }
FC_API CUresult cuStreamGetAttribute_ptsz(CUstream h, CUstreamAttrID a, CUstreamAttrValue *v) { return get_attribute(h, a, v, true); }

static CUresult set_attribute(CUstream h, CUstreamAttrID attr, const CUstreamAttrValue *v, bool ptds)
{
    REQUIRE_INIT();
    if (!v) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    RESOLVE(h, ptds, s);
    if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY) s->priority = v->priority;
    API_RETURN(CUDA_SUCCESS, "\"stream\":%llu,\"attr\":%d", s->id, attr);
}
FC_API CUresult cuStreamSetAttribute(CUstream h, CUstreamAttrID a, const CUstreamAttrValue *v) { return set_attribute(h, a, v, false); }
FC_API CUresult cuStreamSetAttribute_ptsz(CUstream h, CUstreamAttrID a, const CUstreamAttrValue *v) { return set_attribute(h, a, v, true); }

/* ---- capture: graphs are not simulated, so no stream is ever capturing ---- */

static CUresult capture_info(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, bool ptds)
{
    REQUIRE_INIT();
    if (!status) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    RESOLVE(h, ptds, s);
    (void)s;
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (id) *id = 0;
    API_RETURN(CUDA_SUCCESS, "\"status\":0");
}
FC_API CUresult cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    return capture_info(h, st, id, false);
}
FC_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    return capture_info(h, st, id, true);
}

static CUresult capture_info_v2(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                const CUgraphNode **deps, size_t *n, bool ptds)
{
    if (g) *g = NULL;
    if (deps) *deps = NULL;
    if (n) *n = 0;
    return capture_info(h, st, id, ptds);
}
FC_API CUresult cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                          CUgraph *g, const CUgraphNode **deps, size_t *n)
{
    return capture_info_v2(h, st, id, g, deps, n, false);
}
FC_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                               CUgraph *g, const CUgraphNode **deps, size_t *n)
{
    return capture_info_v2(h, st, id, g, deps, n, true);
}

static CUresult capture_info_v3(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *n,
                                bool ptds)
{
    if (edges) *edges = NULL;
    return capture_info_v2(h, st, id, g, deps, n, ptds);
}
FC_API CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                          CUgraph *g, const CUgraphNode **deps,
                                          const CUgraphEdgeData **edges, size_t *n)
{
    return capture_info_v3(h, st, id, g, deps, edges, n, false);
}
FC_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                               CUgraph *g, const CUgraphNode **deps,
                                               const CUgraphEdgeData **edges, size_t *n)
{
    return capture_info_v3(h, st, id, g, deps, edges, n, true);
}

static CUresult is_capturing(CUstream h, CUstreamCaptureStatus *st, bool ptds)
{
    return capture_info(h, st, NULL, ptds);
}
FC_API CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *st) { return is_capturing(h, st, false); }
FC_API CUresult cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus *st) { return is_capturing(h, st, true); }

static __thread CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

FC_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CUstreamCaptureMode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    API_RETURN(CUDA_SUCCESS, "\"mode\":%d", capture_mode);
}
