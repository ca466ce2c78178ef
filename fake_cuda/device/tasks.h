/* Cooperative tasks: many sequential flows of control on one thread.
 *
 * The emulation of an NCCL kernel replays what every CUDA block (and, where
 * the kernel splits a block, every group of warps) does, each as straight-line
 * code that waits on memory other processes write. Running each flow as an OS
 * thread would put hundreds of busy pollers on two cores; here they are
 * coroutines of one scheduler: a flow that must wait calls
 * fc_task_block() or fc_task_wait_word(), and the scheduler runs the others.
 * When a whole pass over the flows made no progress, the scheduler sleeps
 * until a word a flow waits for changes (futex), the net plugin completes a
 * request, or a timeout passes (idle.h); when a flow waits for something
 * nobody wakes it for, it polls a few passes (yielding) first. */
#ifndef NCCLSIM_DEVICE_TASKS_H
#define NCCLSIM_DEVICE_TASKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fc_sched fc_sched;
typedef struct fc_task fc_task;
typedef void (*fc_task_fn)(fc_task *t, void *arg);

/* Why the scheduler stopped early: a flow reported a fatal problem, or the
 * stop condition (NCCL's abort flag) became true. */
typedef bool (*fc_sched_stop_fn)(void *arg);

fc_sched *fc_sched_new(fc_sched_stop_fn stop, void *stop_arg);
/* Start fn(arg) as a new flow (it first runs at the scheduler's next turn).
 * `parent`: a flow that may wait for it with fc_task_join (NULL: none).
 * False when out of memory. */
bool fc_task_spawn(fc_sched *s, fc_task *parent, fc_task_fn fn, void *arg);
/* Run until every flow has returned, or until stop() says so (true then). */
bool fc_sched_run(fc_sched *s);
void fc_sched_free(fc_sched *s);

/* What a flow waits for, for the stall report. A flow blocks thousands of
 * times a second and a report is rare: `write` makes the text only when a
 * report asks (the note lives while its flow is blocked); NULL: `text`. */
typedef struct fc_wait_note fc_wait_note;
struct fc_wait_note {
    void (*write)(const fc_wait_note *note, char *buf, size_t size);
    const char *text;
};

/* Inside a flow: give the turn back; the flow is resumed at a later pass.
 * `what` says what it waits for (for the stall report) and may be NULL. */
void fc_task_block(fc_task *t, const fc_wait_note *what);
/* Inside a flow: give the turn back until the 32-bit word at `word`, named
 * `key` on the wake board (wake_board.h; 0: unknown), no longer holds `seen`
 * (the flow then runs again and checks what it waits for; until then it is
 * not resumed, and a stop ends the scheduler without it). ncclsim's writers
 * of such words wake sleepers (fc_wake_word, idle.h);
 * `proxy`: NCCL's proxy writes it, which wakes nobody, so after the net
 * plugin's announcements the scheduler polls. */
void fc_task_wait_word(fc_task *t, const volatile void *word, uint64_t key, uint32_t seen, bool proxy,
                       const fc_wait_note *what);
/* Inside a flow: the flow moved data or a counter (the pass made progress). */
void fc_task_progress(fc_task *t);
/* Inside a flow: wait until every flow spawned with it as parent returned. */
void fc_task_join(fc_task *t);
fc_sched *fc_task_sched(fc_task *t);
/* Inside a flow: a buffer of at least n bytes, owned by the flow until it
 * ends (reused by its next call, which may return another buffer: contents
 * are not kept across calls), then kept by the thread for other flows or
 * freed, also when a stop abandons the flow. NULL when out of memory. */
void *fc_task_scratch(fc_task *t, size_t n);

/* Modelled time (NCCLSIM_CLOCK=model): every flow has a clock, which its
 * steps move (prims.c). A flow starts at its parent's time, root flows at the
 * scheduler's start; a parent's join ends when its last part did, and the
 * scheduler's end is the latest any flow ended. */
uint64_t *fc_task_now(fc_task *t);
void fc_sched_set_start(fc_sched *s, uint64_t t);
uint64_t fc_sched_end(const fc_sched *s);

#endif
