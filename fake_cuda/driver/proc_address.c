/* cuGetProcAddress: name + requested CUDA version (+ per-thread-stream flag)
 * -> the implementation with that ABI, from entry_points.def. */
#include <string.h>

#include "internal.h"

typedef struct entry {
    const char *name;
    int version;
    bool ptds;
    void *fn;
} entry;

/* The N rows: one function each, which says its name in the trace. Called
 * through a pointer of the API function's type: a CUresult return and ignored
 * arguments are what the calling convention allows. */
static CUresult unsupported(const char *name)
{
    if (fc_trace_enabled() || fc_log_level() >= FC_LOG_DEBUG)
        fc_trace_answer(name, CUDA_ERROR_NOT_SUPPORTED, "\"simulated\":false");
    return CUDA_ERROR_NOT_SUPPORTED;
}

#define E(name, version, symbol)
#define P(name, version, symbol)
#define N(name, version, symbol) \
    __attribute__((used)) static CUresult unsupported_##name##_##version(void) { return unsupported(#name); }
#include "entry_points.def"
#undef E
#undef P
#undef N

/* A real libcuda.so.1 also exports these functions, and libraries look some
 * up with dlsym instead of cuGetProcAddress (cuBLASLt: cuTensorMapEncodeTiled,
 * cuLinkCreate_v2, cuStreamBeginCapture_v2...). Each N row's symbol is a weak
 * alias of its stub, which an implementation of the same symbol elsewhere
 * overrides (cuMemFree: its N row is the 32-bit ABI of an E row's function). */
#define FC_STR(x) #x
#define E(name, version, symbol)
#define P(name, version, symbol)
#define N(name, version, symbol)                                                            \
    __asm__(".ifndef " FC_STR(symbol) "\n\t.weak " FC_STR(symbol) "\n\t.type " FC_STR(symbol) \
            ", @function\n\t.set " FC_STR(symbol) ", unsupported_" #name "_" #version "\n\t.endif");
#include "entry_points.def"
#undef E
#undef P
#undef N

static const entry table[] = {
#define E(name, version, symbol) {#name, version, false, (void *)&symbol},
#define P(name, version, symbol) {#name, version, true, (void *)&symbol},
#define N(name, version, symbol) {#name, version, false, (void *)&unsupported_##name##_##version},
#include "entry_points.def"
#undef E
#undef P
#undef N
};
static const size_t table_n = sizeof table / sizeof table[0];

/* First entry of `name` (the table is sorted by name), or table_n. */
static size_t first_of(const char *name)
{
    size_t lo = 0, hi = table_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(table[mid].name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < table_n && strcmp(table[lo].name, name) == 0 ? lo : table_n;
}

/* Highest version <= requested, preferring the per-thread variant when asked. */
static const entry *lookup(const char *name, int version, bool ptds, bool *too_old)
{
    const entry *best = NULL, *best_ptds = NULL;
    *too_old = false;
    size_t i = first_of(name);
    if (i == table_n) return NULL;
    for (; i < table_n && strcmp(table[i].name, name) == 0; i++) {
        if (table[i].version > version) {
            if (!best && !best_ptds) *too_old = true;
            continue;
        }
        *too_old = false;
        if (table[i].ptds) best_ptds = &table[i];
        else best = &table[i];
    }
    if (ptds && best_ptds && (!best || best_ptds->version >= best->version)) return best_ptds;
    return best;
}

static CUresult get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    bool too_old;
    const entry *e = lookup(symbol, version, flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &too_old);
    if (!e) {
        *pfn = NULL;
        if (status)
            *status = too_old ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                              : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = e->fn;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

FC_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus)
{
    /* Answered before cuInit: the runtime looks up cuInit itself this way. */
    API_ANSWER(get_proc(symbol, pfn, cudaVersion, flags, symbolStatus),
               "\"symbol\":\"%.100s\",\"version\":%d,\"flags\":%llu", symbol ? symbol : "", cudaVersion,
               (unsigned long long)flags);
}

FC_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    API_ANSWER(get_proc(symbol, pfn, cudaVersion, flags, NULL),
               "\"symbol\":\"%.100s\",\"version\":%d,\"flags\":%llu", symbol ? symbol : "", cudaVersion,
               (unsigned long long)flags);
}
