/* Cooperative tasks on ucontext (see tasks.h). */
#include "tasks.h"

#include <sched.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#include "log.h"

/* Flows run NCCL's algorithm loops, a few frames deep, plus libc calls. */
#define STACK_BYTES (128u << 10)
/* Passes without progress before the scheduler sleeps, and the sleeps. */
#define SPIN_PASSES 64
#define SLEEP_MIN_NS 20000L
#define SLEEP_MAX_NS 500000L
/* No progress for this long: say once what every flow waits for
 * (NCCLSIM_STALL_SECONDS, default 30; 0: never). */
#define STALL_REPORT_DEFAULT_S 30

struct fc_task {
    ucontext_t ctx;
    fc_sched *sched;
    fc_task *parent, *next;
    fc_task_fn fn;
    void *arg;
    int children; /* spawned with this as parent, not yet returned */
    uint64_t now;  /* the flow's modelled time (see tasks.h) */
    bool done;
    const char *waiting; /* what it blocked on last */
    void *stack;
    void *scratch;
    size_t scratch_size;
};

struct fc_sched {
    ucontext_t main;
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

fc_sched *fc_sched_new(fc_sched_stop_fn stop, void *stop_arg)
{
    fc_sched *s = calloc(1, sizeof *s);
    if (s) {
        s->stop = stop;
        s->stop_arg = stop_arg;
        s->stall_ns = stall_report_ns();
    }
    return s;
}

/* makecontext passes int arguments only: the task pointer goes in two halves. */
static void trampoline(unsigned hi, unsigned lo)
{
    fc_task *t = (fc_task *)(((uintptr_t)hi << 32) | (uintptr_t)lo);
    t->fn(t, t->arg);
    t->done = true;
    if (t->parent) {
        t->parent->children--;
        if (t->now > t->parent->now) t->parent->now = t->now; /* a join waits for its parts */
    }
    if (t->now > t->sched->end) t->sched->end = t->now;
    t->sched->progress++;
    /* uc_link returns to the scheduler */
}

bool fc_task_spawn(fc_sched *s, fc_task *parent, fc_task_fn fn, void *arg)
{
    fc_task *t = calloc(1, sizeof *t);
    if (!t) return false;
    t->stack = malloc(STACK_BYTES);
    if (!t->stack || getcontext(&t->ctx) != 0) {
        free(t->stack);
        free(t);
        return false;
    }
    t->ctx.uc_stack.ss_sp = t->stack;
    t->ctx.uc_stack.ss_size = STACK_BYTES;
    t->ctx.uc_link = &s->main;
    t->sched = s;
    t->parent = parent;
    t->now = parent ? parent->now : s->start;
    t->fn = fn;
    t->arg = arg;
    uintptr_t p = (uintptr_t)t;
    makecontext(&t->ctx, (void (*)(void))trampoline, 2, (unsigned)(p >> 32), (unsigned)(p & 0xffffffffu));
    if (parent) parent->children++;
    /* append: flows run in the order they were created */
    fc_task **at = &s->tasks;
    while (*at) at = &(*at)->next;
    *at = t;
    return true;
}

void fc_task_block(fc_task *t, const char *what)
{
    t->waiting = what;
    swapcontext(&t->ctx, &t->sched->main);
}

void fc_task_progress(fc_task *t) { t->sched->progress++; }

void fc_task_join(fc_task *t)
{
    FC_WAIT_UNTIL(t, t->children == 0, "its parts to finish");
}

fc_sched *fc_task_sched(fc_task *t) { return t->sched; }

uint64_t *fc_task_now(fc_task *t) { return &t->now; }

void fc_sched_set_start(fc_sched *s, uint64_t t) { s->start = s->end = t; }

uint64_t fc_sched_end(const fc_sched *s) { return s->end; }

void *fc_task_scratch(fc_task *t, size_t n)
{
    if (n > t->scratch_size) {
        void *p = realloc(t->scratch, n);
        if (!p) return NULL;
        t->scratch = p;
        t->scratch_size = n;
    }
    return t->scratch;
}

static void task_free(fc_task *t)
{
    free(t->scratch);
    free(t->stack);
    free(t);
}

static void report_stall(fc_sched *s)
{
    int n = 0;
    for (fc_task *t = s->tasks; t; t = t->next) n++;
    fc_log_fatal_config("NCCL kernel emulation: no progress for %.0f s; %d flow(s) waiting:",
                        (double)s->stall_ns / 1e9, n);
    int shown = 0;
    for (fc_task *t = s->tasks; t && shown < 16; t = t->next, shown++)
        fc_log_fatal_config("  %s", t->waiting ? t->waiting : "(running)");
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
            swapcontext(&s->main, &t->ctx);
            if (t->done) {
                *at = t->next;
                task_free(t);
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
        if (++idle <= SPIN_PASSES) {
            sched_yield();
            continue;
        }
        long ns = SLEEP_MIN_NS << (idle - SPIN_PASSES < 5 ? idle - SPIN_PASSES : 5);
        struct timespec ts = {0, ns < SLEEP_MAX_NS ? ns : SLEEP_MAX_NS};
        nanosleep(&ts, NULL);
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
        task_free(t);
    }
    free(s);
}
