/* Modules, libraries, kernels and functions. Device code never runs here, so
 * images are kept but not parsed: any kernel name resolves to a function
 * handle that remembers its name (launches are recorded by name), and a
 * global is zeroed memory of FC_GLOBAL_BYTES. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define FC_GLOBAL_BYTES 4096

struct CUfunc_st {
    uint32_t magic;
    struct CUmod_st *module;
    char *name;
    int attrs[CU_FUNC_ATTRIBUTE_MAX];
    struct CUfunc_st *next;
};
#define FUNC_MAGIC 0x66756e63u

struct fc_global {
    char *name;
    CUdeviceptr ptr;
    struct fc_global *next;
};

struct CUmod_st {
    uint32_t magic;
    unsigned long long id;
    pthread_mutex_t lock;
    struct CUfunc_st *funcs;
    struct fc_global *globals;
};
#define MOD_MAGIC 0x6d6f646cu

struct CUlib_st {
    uint32_t magic;
    struct CUmod_st *module; /* a library is one module in one context here */
};
#define LIB_MAGIC 0x6c696272u

/* CUkernel handles are the function handles of the library's module. */
static CUfunction kernel_func(CUkernel k) { return (CUfunction)(void *)k; }

static bool valid_mod(CUmodule m) { return m && m->magic == MOD_MAGIC; }
static bool valid_func(CUfunction f) { return f && f->magic == FUNC_MAGIC; }
static bool valid_lib(CUlibrary l) { return l && l->magic == LIB_MAGIC; }

const char *fc_function_name(CUfunction f) { return valid_func(f) ? f->name : "?"; }

static CUmodule module_new(void)
{
    CUmodule m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->magic = MOD_MAGIC;
    m->id = fc_next_id();
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

static void module_free(CUmodule m)
{
    m->magic = 0;
    for (struct fc_global *g = m->globals, *n; g; g = n) {
        n = g->next;
        fc_device_free(g->ptr);
        free(g->name);
        free(g);
    }
    /* Function handles stay valid memory (launches may be queued); mark them dead. */
    for (struct CUfunc_st *f = m->funcs; f; f = f->next) f->magic = 0;
}

/* Values a compiled NCCL-sized kernel typically reports. */
static void func_defaults(CUfunction f)
{
    const fc_platform *p = fc_current_platform();
    int sm = p && p->ngpus ? p->gpu[0].model->sm : 90;
    f->attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024;
    f->attrs[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES] = 0;
    f->attrs[CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES] = 0;
    f->attrs[CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES] = 0;
    f->attrs[CU_FUNC_ATTRIBUTE_NUM_REGS] = 64;
    f->attrs[CU_FUNC_ATTRIBUTE_PTX_VERSION] = sm;
    f->attrs[CU_FUNC_ATTRIBUTE_BINARY_VERSION] = sm;
    f->attrs[CU_FUNC_ATTRIBUTE_CACHE_MODE_CA] = 0;
    f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = 48 * 1024;
    f->attrs[CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT] = -1;
}

static CUresult get_function(CUfunction *out, CUmodule m, const char *name)
{
    if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_mod(m)) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&m->lock);
    CUfunction f;
    for (f = m->funcs; f && strcmp(f->name, name) != 0; f = f->next) {}
    if (!f && (f = calloc(1, sizeof *f)) && (f->name = strdup(name))) {
        f->magic = FUNC_MAGIC;
        f->module = m;
        func_defaults(f);
        f->next = m->funcs;
        m->funcs = f;
    } else if (f && !f->name) {
        free(f);
        f = NULL;
    }
    pthread_mutex_unlock(&m->lock);
    if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
    *out = f;
    return CUDA_SUCCESS;
}

static CUresult get_global(CUdeviceptr *dptr, size_t *bytes, CUmodule m, const char *name)
{
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_mod(m)) return CUDA_ERROR_INVALID_HANDLE;
    CUcontext c;
    CUresult r = fc_ctx_current_checked(&c);
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&m->lock);
    struct fc_global *g;
    for (g = m->globals; g && strcmp(g->name, name) != 0; g = g->next) {}
    if (!g) {
        g = calloc(1, sizeof *g);
        if (g) g->name = strdup(name);
        if (!g || !g->name || (r = fc_device_alloc(c->device, FC_GLOBAL_BYTES, &g->ptr)) != CUDA_SUCCESS) {
            if (g) free(g->name);
            free(g);
            pthread_mutex_unlock(&m->lock);
            return r ? r : CUDA_ERROR_OUT_OF_MEMORY;
        }
        g->next = m->globals;
        m->globals = g;
    }
    pthread_mutex_unlock(&m->lock);
    if (dptr) *dptr = g->ptr;
    if (bytes) *bytes = FC_GLOBAL_BYTES;
    return CUDA_SUCCESS;
}

static CUresult load_image(CUmodule *out, const void *image)
{
    if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
    CUcontext c;
    CUresult r = fc_ctx_current_checked(&c);
    if (r != CUDA_SUCCESS) return r;
    *out = module_new();
    return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* ---- modules ---- */

FC_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    REQUIRE_INIT();
    CUresult r = load_image(module, image);
    API_RETURN(r, "\"module\":%llu", r ? 0ull : (*module)->id);
}

FC_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                   CUjit_option *options, void **optionValues)
{
    (void)numOptions; (void)options; (void)optionValues;
    REQUIRE_INIT();
    CUresult r = load_image(module, image);
    API_RETURN(r, "\"module\":%llu", r ? 0ull : (*module)->id);
}

FC_API CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    REQUIRE_INIT();
    CUresult r = load_image(module, fatCubin);
    API_RETURN(r, "\"module\":%llu", r ? 0ull : (*module)->id);
}

FC_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    REQUIRE_INIT();
    if (!fname) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    struct stat st;
    if (stat(fname, &st) != 0) API_RETURN(CUDA_ERROR_FILE_NOT_FOUND, "\"file\":\"%.200s\"", fname);
    CUresult r = load_image(module, fname);
    API_RETURN(r, "\"file\":\"%.200s\"", fname);
}

FC_API CUresult cuModuleUnload(CUmodule m)
{
    REQUIRE_INIT();
    if (!valid_mod(m)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    unsigned long long id = m->id;
    module_free(m);
    API_RETURN(CUDA_SUCCESS, "\"module\":%llu", id);
}

FC_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    REQUIRE_INIT();
    API_RETURN(get_function(hfunc, hmod, name), "\"name\":\"%.300s\"", name ? name : "");
}

FC_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
    REQUIRE_INIT();
    API_RETURN(get_global(dptr, bytes, hmod, name), "\"name\":\"%.300s\"", name ? name : "");
}

FC_API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    REQUIRE_INIT();
    if (!mode) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    *mode = CU_MODULE_LAZY_LOADING;
    API_RETURN(CUDA_SUCCESS, "");
}

/* ---- libraries (context-independent modules) ---- */

static CUresult library_load(CUlibrary *out, const void *code)
{
    if (!out || !code) return CUDA_ERROR_INVALID_VALUE;
    CUlibrary l = calloc(1, sizeof *l);
    if (!l) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!(l->module = module_new())) {
        free(l);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    l->magic = LIB_MAGIC;
    *out = l;
    return CUDA_SUCCESS;
}

FC_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                  void **jitOptionsValues, unsigned int numJitOptions,
                                  CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                  unsigned int numLibraryOptions)
{
    (void)jitOptions; (void)jitOptionsValues; (void)numJitOptions;
    (void)libraryOptions; (void)libraryOptionValues; (void)numLibraryOptions;
    REQUIRE_INIT();
    CUresult r = library_load(library, code);
    API_RETURN(r, "\"library\":%llu", r ? 0ull : (*library)->module->id);
}

FC_API CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                                      void **jitOptionsValues, unsigned int numJitOptions,
                                      CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                      unsigned int numLibraryOptions)
{
    (void)jitOptions; (void)jitOptionsValues; (void)numJitOptions;
    (void)libraryOptions; (void)libraryOptionValues; (void)numLibraryOptions;
    REQUIRE_INIT();
    struct stat st;
    if (!fileName) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (stat(fileName, &st) != 0) API_RETURN(CUDA_ERROR_FILE_NOT_FOUND, "\"file\":\"%.200s\"", fileName);
    API_RETURN(library_load(library, fileName), "\"file\":\"%.200s\"", fileName);
}

FC_API CUresult cuLibraryUnload(CUlibrary library)
{
    REQUIRE_INIT();
    if (!valid_lib(library)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    library->magic = 0;
    module_free(library->module);
    API_RETURN(CUDA_SUCCESS, "");
}

FC_API CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
    REQUIRE_INIT();
    if (!pMod) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!valid_lib(library)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    *pMod = library->module;
    API_RETURN(CUDA_SUCCESS, "\"module\":%llu", library->module->id);
}

FC_API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    REQUIRE_INIT();
    if (!pKernel) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!valid_lib(library)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    CUfunction f;
    CUresult r = get_function(&f, library->module, name);
    if (r == CUDA_SUCCESS) *pKernel = (CUkernel)(void *)f;
    API_RETURN(r, "\"name\":\"%.300s\"", name ? name : "");
}

FC_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    REQUIRE_INIT();
    if (!valid_lib(library)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    API_RETURN(get_global(dptr, bytes, library->module, name), "\"name\":\"%.300s\"", name ? name : "");
}

FC_API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    REQUIRE_INIT();
    if (!pFunc) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!valid_func(kernel_func(kernel))) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    *pFunc = kernel_func(kernel);
    API_RETURN(CUDA_SUCCESS, "\"name\":\"%.300s\"", (*pFunc)->name);
}

FC_API CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
    (void)pLib; (void)kernel;
    REQUIRE_INIT();
    API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "");
}

FC_API CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
    REQUIRE_INIT();
    if (!name) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!valid_func(kernel_func(hfunc))) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    *name = kernel_func(hfunc)->name;
    API_RETURN(CUDA_SUCCESS, "\"name\":\"%.300s\"", *name);
}

/* ---- function attributes ---- */

static CUresult func_get_attr(int *pi, CUfunction_attribute attrib, CUfunction f)
{
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_func(f)) return CUDA_ERROR_INVALID_HANDLE;
    if ((unsigned)attrib >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
    *pi = f->attrs[attrib];
    return CUDA_SUCCESS;
}

static CUresult func_set_attr(CUfunction f, CUfunction_attribute attrib, int value)
{
    if (!valid_func(f)) return CUDA_ERROR_INVALID_HANDLE;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: {
        const fc_platform *p = fc_current_platform();
        bool k;
        int optin = fc_device_attribute(0, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &k);
        if (value < 0 || (p && value > optin)) return CUDA_ERROR_INVALID_VALUE;
        break;
    }
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: break;
    default: return CUDA_ERROR_INVALID_VALUE; /* read-only attributes */
    }
    f->attrs[attrib] = value;
    return CUDA_SUCCESS;
}

FC_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    REQUIRE_INIT();
    API_RETURN(func_get_attr(pi, attrib, hfunc), "\"attr\":%d", attrib);
}

FC_API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    REQUIRE_INIT();
    API_RETURN(func_set_attr(hfunc, attrib, value), "\"attr\":%d,\"value\":%d", attrib, value);
}

FC_API CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    REQUIRE_INIT();
    if (!fc_valid_device(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "");
    API_RETURN(func_get_attr(pi, attrib, kernel_func(kernel)), "\"attr\":%d", attrib);
}

FC_API CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
    REQUIRE_INIT();
    if (!fc_valid_device(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "");
    API_RETURN(func_set_attr(kernel_func(kernel), attrib, val), "\"attr\":%d,\"value\":%d", attrib, val);
}

FC_API CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    REQUIRE_INIT();
    API_RETURN(valid_func(hfunc) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE, "\"config\":%d", config);
}

FC_API CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    REQUIRE_INIT();
    if (!fc_valid_device(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "");
    API_RETURN(valid_func(kernel_func(kernel)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE,
               "\"config\":%d", config);
}

FC_API CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
    REQUIRE_INIT();
    API_RETURN(valid_func(hfunc) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE, "\"config\":%d", config);
}

FC_API CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    REQUIRE_INIT();
    if (!name) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!valid_func(hfunc)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    *name = hfunc->name;
    API_RETURN(CUDA_SUCCESS, "\"name\":\"%.300s\"", *name);
}

FC_API CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    REQUIRE_INIT();
    if (!hmod) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!valid_func(hfunc)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    *hmod = hfunc->module;
    API_RETURN(CUDA_SUCCESS, "");
}

FC_API CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
    REQUIRE_INIT();
    if (!state) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!valid_func(function)) API_RETURN(CUDA_ERROR_INVALID_HANDLE, "");
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    API_RETURN(CUDA_SUCCESS, "");
}

FC_API CUresult cuFuncLoad(CUfunction function)
{
    REQUIRE_INIT();
    API_RETURN(valid_func(function) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE, "");
}

bool fc_valid_function(CUfunction f) { return valid_func(f); }
int fc_function_attr(CUfunction f, CUfunction_attribute a) { return f->attrs[a]; }
