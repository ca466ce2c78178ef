/* The driver's name for the bytes at an address (net_memory.h). */
#include "net_memory.h"

#include <dlfcn.h>
#include <pthread.h>

static int (*memory_where)(uintptr_t addr, uint64_t *key);
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (cuda) memory_where = (int (*)(uintptr_t, uint64_t *))dlsym(cuda, "ncclsim_memory_where");
}

bool fcn_memory_named(void)
{
    pthread_once(&once, load);
    return memory_where != NULL;
}

uint64_t fcn_memory_key(const void *data)
{
    uint64_t key = 0;
    if (fcn_memory_named()) memory_where((uintptr_t)data, &key);
    return key;
}
