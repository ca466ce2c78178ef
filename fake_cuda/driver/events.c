/* Events complete when their stream reaches them; they carry the time they
 * completed, for cuEventElapsedTime: real time, or under a modelled clock the
 * stream's modelled time at that point. */
#include <stdlib.h>

#include "internal.h"

static bool valid(CUevent e) { return e && e->magic == FC_EVENT_MAGIC; }

FC_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    REQUIRE_INIT();
    CUcontext c;
    if (!phEvent) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CUresult r = fc_ctx_current_checked(&c);
    if (r != CUDA_SUCCESS) API_RETURN(r, "");
    CUevent e = calloc(1, sizeof *e);
    if (!e) API_RETURN(CUDA_ERROR_OUT_OF_MEMORY, "");
    e->magic = FC_EVENT_MAGIC;
    e->flags = Flags;
    e->ctx = c;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    *phEvent = e;
    API_RETURN(CUDA_SUCCESS, "\"flags\":%u,\"event\":\"%p\"", Flags, (void *)e);
}

FC_API CUresult cuEventDestroy_v2(CUevent e)
{
    REQUIRE_INIT();
    if (!valid(e)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    /* Queued records and waits may still refer to it: keep the memory, drop the handle. */
    e->magic = 0;
    API_RETURN(CUDA_SUCCESS, "\"event\":\"%p\"", (void *)e);
}

FC_API CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }

struct record_op {
    CUevent e;
    uint64_t seq;
};

static void complete_record(void *arg)
{
    struct record_op *o = arg;
    CUevent e = o->e;
    pthread_mutex_lock(&e->lock);
    if (e->completed < o->seq) {
        e->completed = o->seq;
        e->time_ns = fc_now_ns();
        e->modelled_ns = fc_time_op_start();
    }
    struct CUstream_st **parked = e->parked;
    int n = e->nparked;
    e->parked = NULL;
    e->nparked = e->parked_cap = 0;
    pthread_mutex_unlock(&e->lock);
    pthread_cond_broadcast(&e->cond); /* after unlocking: a waiter woken before would block on the lock */
    for (int i = 0; i < n; i++) fc_stream_unpark(parked[i]); /* not under the event's lock */
    free(parked);
}

/* Park s on e: s's head waits for e (under e->lock). False when out of
 * memory: the wait then blocks its stream's worker instead. */
static bool park(CUevent e, struct CUstream_st *s)
{
    for (int i = 0; i < e->nparked; i++)
        if (e->parked[i] == s) return true;
    if (e->nparked == e->parked_cap) {
        int cap = e->parked_cap ? 2 * e->parked_cap : 4;
        struct CUstream_st **p = realloc(e->parked, (size_t)cap * sizeof *p);
        if (!p) return false;
        e->parked = p;
        e->parked_cap = cap;
    }
    e->parked[e->nparked++] = s;
    return true;
}

static CUresult record(CUevent e, CUstream h, bool ptds)
{
    REQUIRE_INIT();
    if (!valid(e)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    struct CUstream_st *s;
    CUresult r = fc_stream_resolve(h, ptds, &s);
    if (r != CUDA_SUCCESS) API_RETURN(r, "");
    pthread_mutex_lock(&e->lock);
    struct record_op o = {e, ++e->recorded};
    pthread_mutex_unlock(&e->lock);
    bool ok = fc_stream_enqueue_quick(s, complete_record, &o, sizeof o, NULL);
    API_RETURN(ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY, "\"event\":\"%p\",\"stream\":%llu",
               (void *)e, s->id);
}

FC_API CUresult cuEventRecord(CUevent e, CUstream h) { return record(e, h, false); }
FC_API CUresult cuEventRecord_ptsz(CUevent e, CUstream h) { return record(e, h, true); }
FC_API CUresult cuEventRecordWithFlags(CUevent e, CUstream h, unsigned int flags)
{
    (void)flags; /* CU_EVENT_RECORD_EXTERNAL only matters under graph capture */
    return record(e, h, false);
}
FC_API CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream h, unsigned int flags)
{
    (void)flags;
    return record(e, h, true);
}

FC_API CUresult cuEventQuery(CUevent e)
{
    REQUIRE_INIT();
    if (!valid(e)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    pthread_mutex_lock(&e->lock);
    uint64_t target = e->recorded;
    bool done = e->completed >= target;
    struct timespec until;
    const void *caller = __builtin_return_address(0);
    if (fc_query_wait(done, caller, &until)) { /* asked again and again: wait a little (query_backoff.c) */
        while (e->completed < target && pthread_cond_clockwait(&e->cond, &e->lock, CLOCK_MONOTONIC, &until) == 0) {
        }
        done = e->completed >= target;
        if (done) fc_query_wait(true, caller, NULL);
    }
    uint64_t t = e->modelled_ns;
    pthread_mutex_unlock(&e->lock);
    if (done) fc_time_host_reach(t);
    API_ANSWER(done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY, "\"event\":\"%p\"", (void *)e);
}

FC_API CUresult cuEventSynchronize(CUevent e)
{
    REQUIRE_INIT();
    if (!valid(e)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    pthread_mutex_lock(&e->lock);
    uint64_t target = e->recorded;
    while (e->completed < target) pthread_cond_wait(&e->cond, &e->lock);
    uint64_t t = e->modelled_ns;
    pthread_mutex_unlock(&e->lock);
    fc_time_host_reach(t);
    API_RETURN(CUDA_SUCCESS, "\"event\":\"%p\"", (void *)e);
}

FC_API CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent start, CUevent end)
{
    REQUIRE_INIT();
    if (!pMilliseconds) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!valid(start) || !valid(end)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING)
        API_RETURN(CUDA_ERROR_INVALID_HANDLE, "\"reason\":\"timing disabled\"");
    CUresult r = CUDA_SUCCESS;
    uint64_t t0 = 0, t1 = 0;
    pthread_mutex_lock(&start->lock);
    if (start->recorded == 0) r = CUDA_ERROR_INVALID_HANDLE;
    else if (start->completed < start->recorded) r = CUDA_ERROR_NOT_READY;
    t0 = fc_time_modelled() ? start->modelled_ns : start->time_ns;
    pthread_mutex_unlock(&start->lock);
    pthread_mutex_lock(&end->lock);
    if (end->recorded == 0) r = CUDA_ERROR_INVALID_HANDLE;
    else if (r == CUDA_SUCCESS && end->completed < end->recorded) r = CUDA_ERROR_NOT_READY;
    t1 = fc_time_modelled() ? end->modelled_ns : end->time_ns;
    pthread_mutex_unlock(&end->lock);
    if (r == CUDA_SUCCESS) *pMilliseconds = (float)((double)((int64_t)(t1 - t0)) / 1e6);
    API_RETURN(r, "\"ms\":%.6f", r ? 0.0 : (double)*pMilliseconds);
}

FC_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent start, CUevent end)
{
    return cuEventElapsedTime_v2(pMilliseconds, start, end);
}

struct wait_op {
    CUevent e;
    uint64_t target;
};

static bool wait_ready(void *arg, struct CUstream_st *s)
{
    struct wait_op *o = arg;
    pthread_mutex_lock(&o->e->lock);
    bool ready = o->e->completed >= o->target || !park(o->e, s);
    pthread_mutex_unlock(&o->e->lock);
    return ready;
}

static void wait_event(void *arg)
{
    struct wait_op *o = arg;
    pthread_mutex_lock(&o->e->lock);
    while (o->e->completed < o->target) pthread_cond_wait(&o->e->cond, &o->e->lock);
    fc_time_op_end(o->e->modelled_ns); /* the stream goes on from the event's time */
    pthread_mutex_unlock(&o->e->lock);
}

static CUresult stream_wait_event(CUstream h, CUevent e, unsigned flags, bool ptds)
{
    REQUIRE_INIT();
    if (!valid(e)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    struct CUstream_st *s;
    CUresult r = fc_stream_resolve(h, ptds, &s);
    if (r != CUDA_SUCCESS) API_RETURN(r, "");
    pthread_mutex_lock(&e->lock);
    struct wait_op o = {e, e->recorded};
    bool done = e->completed >= o.target;
    pthread_mutex_unlock(&e->lock);
    /* an event already reached still holds the stream to its modelled time */
    bool ok = (done && !fc_time_modelled()) || fc_stream_enqueue_quick(s, wait_event, &o, sizeof o, done ? NULL : wait_ready);
    API_RETURN(ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY,
               "\"stream\":%llu,\"event\":\"%p\",\"flags\":%u", s->id, (void *)e, flags);
}

FC_API CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags)
{
    return stream_wait_event(h, e, flags, false);
}
FC_API CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int flags)
{
    return stream_wait_event(h, e, flags, true);
}
