/* The driver's view of simulated memory (net_memory.h). */
#include "net_memory.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash_mix.h"

static int (*memory_where)(uintptr_t addr, uint64_t *key);
static bool (*ref_make)(uintptr_t addr, size_t len, fc_mem_ref *out);
static const void *(*ref_open)(const fc_mem_ref *r, size_t len, void **hold);
static void (*ref_release)(void *hold);
static uint64_t reach;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The kernel (its boot id), the pid namespace and the user: processes that
 * agree on all three can open each other's descriptors through /proc. */
static uint64_t reach_of_this_process(void)
{
    char boot[64] = {0};
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    size_t n = f ? fread(boot, 1, sizeof boot - 1, f) : 0;
    if (f) fclose(f);
    struct stat ns;
    if (!n || stat("/proc/self/ns/pid", &ns) != 0) return 0;
    uint64_t h = FC_HASH_SEED;
    for (size_t i = 0; i < n; i++) h = fc_hash_mix(h, (unsigned char)boot[i]);
    h = fc_hash_mix(fc_hash_mix(fc_hash_mix(h, (uint64_t)ns.st_dev), (uint64_t)ns.st_ino), (uint64_t)getuid());
    return h ? h : 1;
}

static void load(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!cuda) return;
    memory_where = (int (*)(uintptr_t, uint64_t *))dlsym(cuda, "ncclsim_memory_where");
    ref_make = (bool (*)(uintptr_t, size_t, fc_mem_ref *))dlsym(cuda, "ncclsim_mem_ref_make");
    ref_open = (const void *(*)(const fc_mem_ref *, size_t, void **))dlsym(cuda, "ncclsim_mem_ref_open");
    ref_release = (void (*)(void *))dlsym(cuda, "ncclsim_mem_ref_release");
    if (ref_make && ref_open && ref_release) reach = reach_of_this_process();
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

uint64_t fcn_memory_reach(void)
{
    pthread_once(&once, load);
    return reach;
}

bool fcn_memory_ref(const void *data, size_t len, fc_mem_ref *out)
{
    return fcn_memory_reach() && ref_make((uintptr_t)data, len, out);
}

const void *fcn_memory_open(const fc_mem_ref *r, size_t len, void **hold)
{
    *hold = NULL;
    return fcn_memory_reach() ? ref_open(r, len, hold) : NULL;
}

void fcn_memory_release(void *hold)
{
    if (hold && ref_release) ref_release(hold);
}
