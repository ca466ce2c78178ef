/* A launch's emulation state (see emu_state.h): its first failure. */
#include "emu_state.h"

#include <stdarg.h>
#include <stdio.h>

void fc_emu_fail(fc_emu *e, const char *fmt, ...)
{
    if (e->error[0]) return; /* the first failure; later ones follow from it */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->error, sizeof e->error, fmt, ap);
    va_end(ap);
}
