#include "trace.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

bool fc_trace_on;
static int trace_fd = -1;
static struct timespec t0;

/* Opened before main(): tracing must see the very first driver call. */
__attribute__((constructor)) static void trace_open(void)
{
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const char *dir = getenv("NCCLSIM_TRACE");
    if (!dir || !*dir) return;
    char path[4096];
    const char *host = getenv("NCCL_HOSTID");
    snprintf(path, sizeof path, "%s/trace-%s-%d.jsonl", dir, host && *host ? host : "local",
             (int)getpid());
    trace_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (trace_fd < 0) {
        fc_log_fatal_config("NCCLSIM_TRACE: cannot create %s", path);
        return;
    }
    fc_trace_on = true;
}

/* Each library of the platform has its own copy of this file; the net plugin
 * may be unloaded and loaded again, so give the descriptor back. */
__attribute__((destructor)) static void trace_close(void)
{
    fc_trace_on = false;
    if (trace_fd >= 0) close(trace_fd);
    trace_fd = -1;
}

static double elapsed_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0.tv_sec) * 1e6 + (double)(t.tv_nsec - t0.tv_nsec) / 1e3;
}

static void emit(const char *kind, const char *name, int result, bool failure, const char *fmt,
                 va_list ap)
{
    char args[1024];
    vsnprintf(args, sizeof args, fmt, ap);
    if (fc_log_level() >= FC_LOG_DEBUG || (failure && fc_log_level() >= FC_LOG_INFO))
        fc_log(result > 0 ? FC_LOG_INFO : FC_LOG_DEBUG, "%s(%s) -> %d", name, args, result);
    if (trace_fd < 0) return;
    char line[1400];
    int n = snprintf(line, sizeof line,
                     "{\"t_us\":%.1f,\"tid\":%ld,\"%s\":\"%s\",\"result\":%d,\"args\":{%s}}\n",
                     elapsed_us(), (long)syscall(SYS_gettid), kind, name, result, args);
    if (n > 0) {
        if ((size_t)n >= sizeof line) { /* keep the line valid JSON */
            n = snprintf(line, sizeof line,
                         "{\"t_us\":%.1f,\"tid\":%ld,\"%s\":\"%s\",\"result\":%d,\"args\":{}}\n",
                         elapsed_us(), (long)syscall(SYS_gettid), kind, name, result);
        }
        ssize_t w = write(trace_fd, line, (size_t)n); /* O_APPEND: whole lines */
        (void)w;
    }
}

void fc_trace_call(const char *name, int result, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("call", name, result, result != 0, fmt, ap);
    va_end(ap);
}

void fc_trace_answer(const char *name, int result, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("call", name, result, false, fmt, ap);
    va_end(ap);
}

void fc_trace_event(const char *kind, const char *fmt, ...)
{
    if (!fc_trace_enabled() && fc_log_level() < FC_LOG_DEBUG) return;
    va_list ap;
    va_start(ap, fmt);
    emit("event", kind, 0, false, fmt, ap);
    va_end(ap);
}
