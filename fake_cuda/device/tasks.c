/* Cooperative tasks (see tasks.h): a flow starts on its own stack through
 * ucontext; after that, switches are _setjmp/_longjmp, which unlike
 * swapcontext make no system call (swapcontext saves and restores the
 * signal mask: two calls per switch, most of the emulation's system calls). */
#undef _FORTIFY_SOURCE /* its longjmp check refuses a jump to another stack */
#include "tasks.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <setjmp.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "idle.h"
#include "log.h"
#include "thread_exit.h"

/* Flows run NCCL's algorithm loops, a few frames deep, plus libc calls. */
#define STACK_BYTES (128u << 10)
/* Passes without progress before the scheduler sleeps, when a flow waits for
 * something nobody wakes (a word NCCL's proxy writes right after the plugin's
 * announcement woke us), and the sleeps: a timeout bounds a wake nobody
 * sends (the abort flag, a word NCCL's host code writes). */
#define SPIN_PASSES 16
#define SLEEP_MIN_NS 20000L
#define SLEEP_MAX_NS 2000000L
/* When every flow waits for a word ncclsim's writers wake it for, the
 * timeout only bounds how late the flows see NCCL's abort flag. A GPU often
 * waits longer than SLEEP_MAX_NS for its next step (on 8 x 8, the leaves of
 * a tree for the broadcast down it), and waking for nothing is a thread
 * switch on a machine shared by every rank. */
#define SLEEP_WOKEN_NS 50000000L
/* No progress for this long: say once what every flow waits for
 * (NCCLSIM_STALL_SECONDS, default 30; 0: never). */
#define STALL_REPORT_DEFAULT_S 30

/* What a blocked flow waits for, which decides when the scheduler resumes it. */
typedef enum {
    WAIT_POLL,       /* something nobody wakes it for (or it is new): resumed every pass */
    WAIT_WORD,       /* a word ncclsim's writers wake it for */
    WAIT_PROXY_WORD, /* a word NCCL's proxy writes: polled a while after the plugin's announcements */
    WAIT_JOIN,       /* its parts, in this scheduler */
} wait_kind;

struct fc_task {
    ucontext_t ctx; /* its start */
    jmp_buf env;    /* where it blocked */
    bool started;
    fc_sched *sched;
    fc_task *parent, *next;
    fc_task_fn fn;
    void *arg;
    int children; /* spawned with this as parent, not yet returned */
    uint64_t now;  /* the flow's modelled time (see tasks.h) */
    bool done;
    const fc_wait_note *waiting; /* what it blocked on last */
    wait_kind wait;
    const volatile uint32_t *word; /* WAIT_WORD, WAIT_PROXY_WORD: runs again once *word != seen */
    uint64_t key;                  /* the word's name on the wake board */
    uint32_t seen;
    void *stack;
    void *scratch;
    size_t scratch_size;
};

struct fc_sched {
    jmp_buf main_env; /* the scheduler, resuming a flow */
    fc_task *tasks; /* live flows, in spawn order */
    uint64_t progress;
    fc_sched_stop_fn stop;
    void *stop_arg;
    uint64_t stall_ns; /* 0: no stall report */
    uint64_t start, end; /* modelled: where root flows start, the latest any ended */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t stall_ns;
static void read_stall_seconds(void)
{
    const char *env = getenv("NCCLSIM_STALL_SECONDS");
    double secs = env && *env ? strtod(env, NULL) : STALL_REPORT_DEFAULT_S;
    stall_ns = secs > 0 ? (uint64_t)(secs * 1e9) : 0;
}

/* NCCLSIM_STALL_SECONDS, read once (a scheduler is made per launch). */
static uint64_t stall_report_ns(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, read_stall_seconds);
    return stall_ns;
}

/* makecontext passes int arguments only: the task pointer goes in two halves.
 * A flow's context runs one flow after another: when its function returns,
 * it waits in the thread's pool of finished flows to be given the next one
 * (starting a context costs getcontext and setcontext, a system call each). */
static void trampoline(unsigned hi, unsigned lo)
{
    fc_task *t = (fc_task *)(((uintptr_t)hi << 32) | (uintptr_t)lo);
    for (;;) {
        t->fn(t, t->arg);
        t->done = true;
        if (t->parent) {
            t->parent->children--;
            if (t->now > t->parent->now) t->parent->now = t->now; /* a join waits for its parts */
        }
        if (t->now > t->sched->end) t->sched->end = t->now;
        t->sched->progress++;
        if (!_setjmp(t->env)) _longjmp(t->sched->main_env, 1); /* resumed: the next flow */
    }
}

/* Inside a flow: back to the scheduler, until it resumes the flow. */
static void switch_out(fc_task *t)
{
    if (!_setjmp(t->env)) _longjmp(t->sched->main_env, 1);
}

/* The scheduler: run t until it blocks or ends. */
static __attribute__((noinline)) void resume(fc_sched *s, fc_task *t)
{
    if (_setjmp(s->main_env)) return; /* the flow switched out */
    if (!t->started) {
        t->started = true;
        setcontext(&t->ctx);
    }
    _longjmp(t->env, 1);
}

/* Finished flows and scratch buffers, kept by the thread that ran them for
 * its next launches: a fresh stack or scratch buffer is an mmap (above
 * malloc's threshold, which launch fixes at 64 KiB), page faults to
 * fill it and an munmap with its TLB shootdown (an interrupt to every CPU
 * running a thread of the process), per flow and launch. An NVLS AllReduce
 * runs 5 flows per channel, a step of scratch in some (the team's sum): the
 * thread keeps that many flows, and its scratch apart from them (a flow
 * given the next launch's role may not need it), up to a bound. When the
 * bound is reached the smallest buffers make way for larger ones: a run's
 * small operations leave many small LL staging buffers, and large ones
 * each need a step's worth (64 KiB and up, fresh mappings every launch
 * if not kept). */
#define KEPT_FLOWS 512
#define KEPT_SCRATCH 128
#define KEPT_SCRATCH_BYTES (1u << 20)       /* a larger scratch buffer is not kept */
#define KEPT_SCRATCH_TOTAL_BYTES (8u << 20)  /* nor more than this much in all */
typedef struct {
    fc_task *flow[KEPT_FLOWS];
    int n;
    struct {
        void *p;
        size_t size;
    } scratch[KEPT_SCRATCH];
    int nscratch;
    size_t scratch_bytes;
    fc_sched *sched; /* the last one freed, for the next launch */
} kept_flows;
static __thread kept_flows *thread_kept;

static void task_destroy(fc_task *t)
{
    free(t->scratch);
    free(t->stack);
    free(t);
}

static void kept_free(void *arg) /* at the thread's exit */
{
    kept_flows *k = arg;
    while (k->n) task_destroy(k->flow[--k->n]);
    while (k->nscratch) free(k->scratch[--k->nscratch].p);
    free(k->sched);
    free(k);
    thread_kept = NULL; /* a later destructor of the thread's that frees a flow makes a new one */
}

static fc_thread_exit kept_exit = FC_THREAD_EXIT_INIT(kept_free);

/* The calling thread's; NULL: it keeps nothing (no memory, no key). */
static kept_flows *kept(void)
{
    if (thread_kept) return thread_kept;
    kept_flows *k = calloc(1, sizeof *k);
    if (k && !fc_thread_exit_arm(&kept_exit, k)) {
        free(k);
        return NULL;
    }
    return thread_kept = k;
}

fc_sched *fc_sched_new(fc_sched_stop_fn stop, void *stop_arg)
{
    kept_flows *k = kept();
    fc_sched *s;
    if (k && k->sched) {
        s = k->sched;
        k->sched = NULL;
    } else {
        s = malloc(sizeof *s);
    }
    if (s) {
        memset(s, 0, sizeof *s);
        s->stop = stop;
        s->stop_arg = stop_arg;
        s->stall_ns = stall_report_ns();
    }
    return s;
}

/* The index of the thread's smallest kept scratch buffer; -1: none. */
static int smallest_kept(const kept_flows *k)
{
    int best = -1;
    for (int i = 0; i < k->nscratch; i++)
        if (best < 0 || k->scratch[i].size < k->scratch[best].size) best = i;
    return best;
}

static void drop_kept(kept_flows *k, int i)
{
    free(k->scratch[i].p);
    k->scratch_bytes -= k->scratch[i].size;
    k->scratch[i] = k->scratch[--k->nscratch];
}

/* A flow's scratch goes back to the thread's, in place of smaller ones
 * when the thread keeps its bound, or is freed. */
static void scratch_put(fc_task *t)
{
    kept_flows *k = kept();
    if (!t->scratch) return;
    size_t size = t->scratch_size;
    if (k && size <= KEPT_SCRATCH_BYTES) {
        int s;
        while ((k->nscratch == KEPT_SCRATCH || k->scratch_bytes + size > KEPT_SCRATCH_TOTAL_BYTES) &&
               (s = smallest_kept(k)) >= 0 && k->scratch[s].size < size)
            drop_kept(k, s);
    }
    if (k && k->nscratch < KEPT_SCRATCH && size <= KEPT_SCRATCH_BYTES &&
        k->scratch_bytes + size <= KEPT_SCRATCH_TOTAL_BYTES) {
        k->scratch[k->nscratch].p = t->scratch;
        k->scratch[k->nscratch++].size = size;
        k->scratch_bytes += size;
    } else {
        free(t->scratch);
    }
    t->scratch = NULL;
    t->scratch_size = 0;
}

/* The smallest kept scratch buffer of at least n bytes, taken from the
 * thread's; NULL when none is. */
static void *scratch_take(size_t n, size_t *size)
{
    kept_flows *k = kept();
    int best = -1;
    for (int i = 0; k && i < k->nscratch; i++)
        if (k->scratch[i].size >= n && (best < 0 || k->scratch[i].size < k->scratch[best].size)) best = i;
    if (best < 0) return NULL;
    void *p = k->scratch[best].p;
    *size = k->scratch[best].size;
    k->scratch_bytes -= *size;
    k->scratch[best] = k->scratch[--k->nscratch];
    return p;
}

/* A finished flow, or a new one whose context starts in trampoline. */
static fc_task *task_get(void)
{
    kept_flows *k = kept();
    if (k && k->n) return k->flow[--k->n];
    fc_task *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->stack = malloc(STACK_BYTES);
    if (!t->stack || getcontext(&t->ctx) != 0) {
        task_destroy(t);
        return NULL;
    }
    t->ctx.uc_stack.ss_sp = t->stack;
    t->ctx.uc_stack.ss_size = STACK_BYTES;
    t->ctx.uc_link = NULL; /* the context never ends */
    uintptr_t p = (uintptr_t)t;
    makecontext(&t->ctx, (void (*)(void))trampoline, 2, (unsigned)(p >> 32), (unsigned)(p & 0xffffffffu));
    return t;
}

/* A flow leaves its scheduler: finished, it waits for the next; abandoned
 * mid-way (a stop), its context cannot be reused. */
static void task_put(fc_task *t)
{
    kept_flows *k = kept();
    scratch_put(t);
    if (!t->done || !k || k->n == KEPT_FLOWS) task_destroy(t);
    else k->flow[k->n++] = t;
}

bool fc_task_spawn(fc_sched *s, fc_task *parent, fc_task_fn fn, void *arg)
{
    fc_task *t = task_get();
    if (!t) return false;
    /* what a flow keeps from the previous one: its context, stack and scratch */
    t->sched = s;
    t->parent = parent;
    t->next = NULL;
    t->children = 0;
    t->now = parent ? parent->now : s->start;
    t->done = false;
    t->waiting = NULL;
    t->wait = WAIT_POLL;
    t->fn = fn;
    t->arg = arg;
    if (parent) parent->children++;
    /* append: flows run in the order they were created */
    fc_task **at = &s->tasks;
    while (*at) at = &(*at)->next;
    *at = t;
    return true;
}

static void block_on(fc_task *t, wait_kind kind, const fc_wait_note *what)
{
    t->wait = kind;
    t->waiting = what;
    switch_out(t);
}

void fc_task_block(fc_task *t, const fc_wait_note *what) { block_on(t, WAIT_POLL, what); }

void fc_task_wait_word(fc_task *t, const volatile void *word, uint64_t key, uint32_t seen, bool proxy,
                       const fc_wait_note *what)
{
    t->word = word;
    t->key = key;
    t->seen = seen;
    block_on(t, proxy ? WAIT_PROXY_WORD : WAIT_WORD, what);
}

void fc_task_progress(fc_task *t) { t->sched->progress++; }

void fc_task_join(fc_task *t)
{
    static const fc_wait_note parts = {NULL, "its parts to finish"};
    while (t->children) block_on(t, WAIT_JOIN, &parts);
}

fc_sched *fc_task_sched(fc_task *t) { return t->sched; }

uint64_t *fc_task_now(fc_task *t) { return &t->now; }

void fc_sched_set_start(fc_sched *s, uint64_t t) { s->start = s->end = t; }

uint64_t fc_sched_end(const fc_sched *s) { return s->end; }

void *fc_task_scratch(fc_task *t, size_t n)
{
    if (n > t->scratch_size) {
        size_t kept_size;
        void *p = scratch_take(n, &kept_size);
        if (p) {
            scratch_put(t); /* the smaller one, for another flow */
            t->scratch = p;
            t->scratch_size = kept_size;
            return p;
        }
        p = realloc(t->scratch, n);
        if (!p) return NULL;
        t->scratch = p;
        t->scratch_size = n;
    }
    return t->scratch;
}

static void report_stall(fc_sched *s)
{
    int n = 0;
    for (fc_task *t = s->tasks; t; t = t->next) n++;
    fc_log_fatal_config("NCCL kernel emulation: no progress for %.0f s; %d flow(s) waiting:",
                        (double)s->stall_ns / 1e9, n);
    int shown = 0;
    for (fc_task *t = s->tasks; t && shown < 16; t = t->next, shown++) {
        char text[256];
        const fc_wait_note *w = t->waiting;
        if (w && w->write) w->write(w, text, sizeof text);
        fc_log_fatal_config("  %s", !w ? "(running)" : w->write ? text : w->text ? w->text : "(not said)");
    }
}

static bool waits_for_word(const fc_task *t) { return t->wait == WAIT_WORD || t->wait == WAIT_PROXY_WORD; }

/* Still waiting (for its word, for its parts): not worth a switch into the flow. */
static bool unchanged(const fc_task *t)
{
    if (waits_for_word(t)) return __atomic_load_n(t->word, __ATOMIC_ACQUIRE) == t->seen;
    return t->wait == WAIT_JOIN && t->children;
}

/* Count sleepers on the words named keys[0..n) in (+1) or out (-1) of the
 * wake board's buckets. */
static void count_sleepers(const uint64_t *keys, unsigned n, int delta)
{
    for (unsigned i = 0; i < n; i++) fc_wake_board_sleep(keys[i], delta);
}

/* Sleep until a flow's word changes, the net plugin completes a request
 * (idle.h; only while a flow waits for a word NCCL's proxy writes) or `ns`
 * pass (SLEEP_MAX_NS at most when the words are polled); true when
 * something changed. */
static bool sleep_for_words(fc_sched *s, long ns)
{
    struct futex_waitv w[FUTEX_WAITV_MAX];
    uint64_t keys[FUTEX_WAITV_MAX];
    unsigned n = 0;
    bool proxy = false;
    for (fc_task *t = s->tasks; t; t = t->next) {
        if (!waits_for_word(t)) continue;
        proxy |= t->wait == WAIT_PROXY_WORD;
        if (n == FUTEX_WAITV_MAX - 1) { /* too many to watch (one slot for the nudges): poll */
            n = 0;
            proxy = false;
            break;
        }
        keys[n] = t->key;
        w[n++] = (struct futex_waitv){.val = t->seen, .uaddr = (uintptr_t)t->word, .flags = FUTEX_32};
    }
    unsigned words = n;
    count_sleepers(keys, words, +1); /* before the kernel reads the words: see wake_board.h */
    proxy &= ncclsim_gpu_nudges && ncclsim_gpu_nudge_sleepers;
    if (proxy) {
        ncclsim_gpu_nudge_sleepers(+1);
        volatile uint32_t *g = ncclsim_gpu_nudges();
        w[n++] = (struct futex_waitv){.val = __atomic_load_n(g, __ATOMIC_SEQ_CST), .uaddr = (uintptr_t)g,
                                      .flags = FUTEX_32};
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += ns;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    long r = n ? syscall(SYS_futex_waitv, w, n, 0, &ts, CLOCK_MONOTONIC) : -1;
    int err = errno;
    count_sleepers(keys, words, -1);
    if (proxy) ncclsim_gpu_nudge_sleepers(-1);
    if (r >= 0) return true;
    if (n && err != ENOSYS) return err != ETIMEDOUT; /* EAGAIN: a word had changed already */
    /* nothing watched (too many words, or no futex_waitv before Linux 5.16) */
    struct timespec nap = {0, ns < SLEEP_MAX_NS ? ns : SLEEP_MAX_NS};
    nanosleep(&nap, NULL);
    return false;
}

bool fc_sched_run(fc_sched *s)
{
    unsigned idle = 0;
    uint64_t idle_since = 0;
    bool reported = false;
    while (s->tasks) {
        uint64_t before = s->progress;
        for (fc_task **at = &s->tasks; *at;) {
            fc_task *t = *at;
            if (!unchanged(t)) resume(s, t);
            if (t->done) {
                *at = t->next;
                task_put(t);
            } else {
                at = &t->next;
            }
        }
        if (s->progress != before) {
            idle = 0;
            idle_since = 0;
            continue;
        }
        if (s->stop && s->stop(s->stop_arg)) return true;
        bool polled = false; /* a flow waits for what nobody wakes it for */
        for (fc_task *t = s->tasks; t && !polled; t = t->next)
            polled = t->wait == WAIT_POLL || t->wait == WAIT_PROXY_WORD;
        if (++idle <= SPIN_PASSES && polled) {
            sched_yield();
            continue;
        }
        long ns = SLEEP_WOKEN_NS;
        if (polled) {
            unsigned doublings = idle - SPIN_PASSES < 7 ? idle - SPIN_PASSES : 7;
            ns = SLEEP_MIN_NS << doublings;
            if (ns > SLEEP_MAX_NS) ns = SLEEP_MAX_NS;
        }
        if (sleep_for_words(s, ns)) idle = 0; /* poll again a while */
        uint64_t now = now_ns();
        if (!idle_since) idle_since = now;
        if (!reported && s->stall_ns && now - idle_since > s->stall_ns) {
            report_stall(s);
            reported = true;
        }
    }
    return false;
}

void fc_sched_free(fc_sched *s)
{
    if (!s) return;
    while (s->tasks) { /* flows abandoned by a stop */
        fc_task *t = s->tasks;
        s->tasks = t->next;
        task_put(t);
    }
    kept_flows *k = kept();
    if (k && !k->sched) k->sched = s;
    else free(s);
}
