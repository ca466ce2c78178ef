#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int level = -1;

int fc_log_level(void)
{
    if (__builtin_expect(level < 0, 0)) {
        const char *s = getenv("NCCLSIM_LOG");
        level = s ? atoi(s) : 0;
    }
    return level;
}

static void vprint(const char *tag, const char *fmt, va_list ap)
{
    char line[1024];
    int n = snprintf(line, sizeof line, "ncclsim[%d] %s: ", (int)getpid(), tag);
    if (n < 0) return;
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    fprintf(stderr, "%s\n", line); /* one write per line: ranks share stderr */
}

void fc_log(int lvl, const char *fmt, ...)
{
    static const char *tags[] = {"", "error", "info", "debug"};
    va_list ap;
    va_start(ap, fmt);
    vprint(tags[lvl < 1 ? 1 : lvl > 3 ? 3 : lvl], fmt, ap);
    va_end(ap);
}

void fc_log_fatal_config(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint("error", fmt, ap);
    va_end(ap);
}
