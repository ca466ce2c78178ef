/* NCCLSIM_TRACE=<dir>: one JSON-lines file per process (<dir>/trace-<host>-<pid>.jsonl)
 * recording every driver call: name, key arguments, result, time. */
#ifndef NCCLSIM_TRACE_H
#define NCCLSIM_TRACE_H

#include <stdbool.h>

extern bool fc_trace_on;
static inline bool fc_trace_enabled(void) { return __builtin_expect(fc_trace_on, 0); }
/* `fmt` formats the arguments as the inside of a JSON object ("\"dev\":%d"),
 * or "" for none. Also logs the call at NCCLSIM_LOG>=3 (failures at >=2). */
void fc_trace_call(const char *name, int result, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same for answers that are not failures although non-zero (NOT_READY,
 * NOT_FOUND of an optional symbol): logged at NCCLSIM_LOG>=3 only. */
void fc_trace_answer(const char *name, int result, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A free-form event (kernel launches, platform load). */
void fc_trace_event(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
