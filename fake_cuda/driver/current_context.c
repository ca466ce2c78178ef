/* The calling thread's current context (a stack per thread: cuCtxPush/Pop/
 * SetCurrent) and the check every entry point makes of a context handle.
 * Memory and streams ask for the current context; contexts.c, which creates
 * contexts and waits for their streams, changes it through these. */
#include <string.h>

#include "idle.h"
#include "internal.h"

static __thread CUcontext ctx_stack[FC_CTX_STACK_MAX];
static __thread int ctx_depth;

bool fc_valid_ctx(CUcontext c)
{
    if (!c || c->magic != FC_CTX_MAGIC) return false;
    return !c->primary || atomic_load(&c->refcount) > 0;
}

CUcontext fc_current_ctx(void) { return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL; }

CUresult fc_ctx_current_checked(CUcontext *out)
{
    CUcontext c = fc_current_ctx();
    if (!fc_valid_ctx(c)) return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

/* After every change of this thread's current context: the host library
 * wakes a sleeping NCCL proxy thread only for its own device's work. */
static void current_changed(void)
{
    CUcontext c = fc_current_ctx();
    fc_thread_device(c ? c->device : -1);
}

void fc_ctx_set_current(CUcontext ctx)
{
    if (ctx_depth == 0) {
        if (ctx) ctx_stack[ctx_depth++] = ctx;
    } else if (ctx) {
        ctx_stack[ctx_depth - 1] = ctx;
    } else {
        ctx_depth--;
    }
    current_changed();
}

bool fc_ctx_push(CUcontext ctx)
{
    if (ctx_depth >= FC_CTX_STACK_MAX) return false;
    ctx_stack[ctx_depth++] = ctx;
    current_changed();
    return true;
}

bool fc_ctx_pop(CUcontext *out)
{
    if (ctx_depth == 0) return false;
    *out = ctx_stack[--ctx_depth];
    current_changed();
    return true;
}

void fc_ctx_forget(CUcontext ctx)
{
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] == ctx) {
            memmove(&ctx_stack[i], &ctx_stack[i + 1], (size_t)(ctx_depth - i - 1) * sizeof ctx);
            ctx_depth--;
            i--;
        }
    current_changed();
}
