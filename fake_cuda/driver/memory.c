/* Simulated memory. Device memory is host memory at the same address
 * (identity mapped), each allocation its own memfd so it can be shared with
 * other processes (VMM export, IPC handles) and costs nothing until touched.
 * A registry of every range answers pointer queries. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "processes.h"
#include "vmm_handle.h"

/* ---- the registry: sorted by base, non-overlapping ---- */

static pthread_rwlock_t reg_lock = PTHREAD_RWLOCK_INITIALIZER;
static fc_alloc *reg;
static size_t reg_n, reg_cap;

static size_t lower_bound(uintptr_t addr) /* first index with base >= addr */
{
    size_t lo = 0, hi = reg_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (reg[mid].base < addr) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Registered host memory mapped from a file (NCCL's shared-memory segments,
 * which every process of a connection maps and registers): the file's inode
 * and the range's offset in it, from the process's memory map; false when
 * the range is not one file mapping. */
static bool mapped_file(uintptr_t base, size_t size, uint64_t *ino, size_t *offset)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long start, end, off, inode;
        if (sscanf(line, "%lx-%lx %*s %lx %*s %lu", &start, &end, &off, &inode) != 4) continue;
        if (base < start || base >= end) continue;
        found = inode && base + size <= end;
        *ino = inode;
        *offset = off + (base - start);
        break;
    }
    fclose(f);
    return found;
}

/* Whose memory a range is (device ordinal, -1 host) and its memfd's inode. */
static void identify(fc_alloc *a)
{
    a->home = a->kind == FC_MEM_HOST_ALLOC || a->kind == FC_MEM_HOST_REGISTERED ? -1 : a->device;
    a->ino = 0;
    if (a->kind == FC_MEM_HOST_REGISTERED) {
        uint64_t ino;
        size_t offset;
        /* a file's inode is named apart from the memfds' (another file system) */
        if (mapped_file(a->base, a->size, &ino, &offset) && ino && ino < FC_FILE_INODES) {
            a->ino = ino | FC_FILE_INODES;
            a->offset = offset;
        }
        return;
    }
    /* a multicast range is named by its object's shared state, the same in every member */
    int fd = a->kind == FC_MEM_MULTICAST && a->handle ? ((const fc_vmm_handle *)a->handle)->fd : a->fd;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return;
    a->ino = (uint64_t)st.st_ino;
    if (a->kind == FC_MEM_MULTICAST) return;
    char link[64], name[256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, name, sizeof name - 1);
    if (n <= 0) return;
    name[n] = 0;
    a->home = -1;
    for (char *d = strstr(name, "-d"); d; d = strstr(d + 1, "-d")) { /* the last "-d<digits>" */
        char *end;
        long dev = strtol(d + 2, &end, 10);
        if (end != d + 2 && dev >= 0 && d[2] >= '0' && d[2] <= '9') a->home = (int)dev;
    }
}

void fc_registry_add(const fc_alloc *a_in)
{
    fc_alloc copy = *a_in, *a = &copy;
    identify(a);
    pthread_rwlock_wrlock(&reg_lock);
    if (reg_n == reg_cap) {
        size_t cap = reg_cap ? reg_cap * 2 : 256;
        fc_alloc *n = realloc(reg, cap * sizeof *n);
        if (!n) abort(); /* the registry is the driver's memory map: cannot go on without it */
        reg = n;
        reg_cap = cap;
    }
    size_t i = lower_bound(a->base);
    memmove(&reg[i + 1], &reg[i], (reg_n - i) * sizeof *reg);
    reg[i] = *a;
    if (!reg[i].buffer_id) reg[i].buffer_id = fc_next_id();
    reg_n++;
    pthread_rwlock_unlock(&reg_lock);
}

static long find_index(uintptr_t addr)
{
    size_t i = lower_bound(addr + 1); /* first with base > addr */
    if (i == 0) return -1;
    const fc_alloc *a = &reg[i - 1];
    return addr - a->base < a->size ? (long)(i - 1) : -1;
}

bool fc_registry_find(uintptr_t addr, fc_alloc *out)
{
    pthread_rwlock_rdlock(&reg_lock);
    long i = find_index(addr);
    if (i >= 0 && out) *out = reg[i];
    pthread_rwlock_unlock(&reg_lock);
    return i >= 0;
}

int fc_sim_memory_where(uintptr_t addr, uint64_t *key)
{
    fc_alloc a;
    if (!fc_registry_find(addr, &a)) {
        *key = 0;
        return FC_WHERE_NONE;
    }
    *key = fc_memory_key(a.ino, a.offset + (addr - a.base));
    if (!*key) *key = (uint64_t)addr | 1ull << 63; /* no memfd: the address names it, in this process only */
    return a.home;
}

/* For the net plugin, which loads beside the driver: the same answer under a
 * name of ncclsim's own (it finds it with dlsym on libcuda.so.1). */
FC_API int ncclsim_memory_where(uintptr_t addr, uint64_t *key) { return fc_sim_memory_where(addr, key); }

/* The same bytes, the same key, in every process: a file's name in 23 bits
 * (memfd or other file, then its inode's low 22 bits) and the offset in 40.
 * Inode numbers only grow while a machine runs (past 2^23 after some 8
 * million files): the low bits name a file, and two files of one run share
 * them only if their numbers differ by a multiple of 2^22, which takes 4
 * million files made while the first is in use. */
#define INODE_BITS 22
uint64_t fc_memory_key(uint64_t ino, uint64_t off)
{
    if (!ino || off >= (1ull << 40)) return 0;
    uint64_t name = (ino & FC_FILE_INODES ? 1ull << INODE_BITS : 0) | (ino & ((1ull << INODE_BITS) - 1));
    return (name << 40 | off) + 1;
}

size_t fc_sim_memory_span(uintptr_t addr)
{
    fc_alloc a;
    return fc_registry_find(addr, &a) ? a.base + a.size - addr : 0;
}

bool fc_registry_overlaps(uintptr_t base, size_t size)
{
    pthread_rwlock_rdlock(&reg_lock);
    size_t i = lower_bound(base + size); /* ranges starting before the end */
    bool hit = i > 0 && reg[i - 1].base + reg[i - 1].size > base;
    pthread_rwlock_unlock(&reg_lock);
    return hit;
}

static uint64_t generation;

uint64_t fc_sim_memory_generation(void) { return __atomic_load_n(&generation, __ATOMIC_ACQUIRE); }

void fc_sim_memory_changed(void) { __atomic_fetch_add(&generation, 1, __ATOMIC_ACQ_REL); }

bool fc_registry_remove(uintptr_t base, fc_alloc *out)
{
    pthread_rwlock_wrlock(&reg_lock);
    size_t i = lower_bound(base);
    bool found = i < reg_n && reg[i].base == base;
    if (found) {
        if (out) *out = reg[i];
        memmove(&reg[i], &reg[i + 1], (reg_n - i - 1) * sizeof *reg);
        reg_n--;
    }
    pthread_rwlock_unlock(&reg_lock);
    /* after the range left: a lookup that still found it is older than this */
    if (found) fc_sim_memory_changed();
    return found;
}

bool fc_backing_fd(uintptr_t addr, size_t len, int *fd, size_t *offset)
{
    fc_alloc a;
    if (!fc_registry_find(addr, &a) || addr + len > a.base + a.size || a.kind == FC_MEM_MULTICAST) return false;
    *fd = a.fd;
    *offset = a.offset + (addr - a.base);
    return *fd >= 0;
}

/* ---- backing memory ---- */

int fc_memfd_map(size_t size, uintptr_t fixed, const char *name, int *fd_out, void **addr_out)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) return -errno;
    if (ftruncate(fd, (off_t)size) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    void *p = mmap((void *)fixed, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | (fixed ? MAP_FIXED : 0), fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return -e;
    }
    *fd_out = fd;
    *addr_out = p;
    return 0;
}

/* ---- capacity per device ---- */

static atomic_size_t used[FC_MAX_GPUS];
static atomic_int in_use[FC_MAX_GPUS]; /* a context or memory on it: NVML lists this process */
static pthread_mutex_t publish_lock = PTHREAD_MUTEX_INITIALIZER;

/* What NVML's process listings of this host read (common/processes.h). */
static void publish_use(void)
{
    const fc_platform *p = fc_current_platform();
    int use[FC_MAX_GPUS];
    size_t bytes[FC_MAX_GPUS];
    for (int d = 0; d < FC_MAX_GPUS; d++) {
        use[d] = atomic_load(&in_use[d]);
        bytes[d] = atomic_load(&used[d]);
    }
    pthread_mutex_lock(&publish_lock);
    fc_processes_publish(p, use, bytes);
    pthread_mutex_unlock(&publish_lock);
}

void fc_mem_mark_in_use(CUdevice dev)
{
    if (!atomic_exchange(&in_use[dev], 1)) publish_use();
}

bool fc_mem_reserve(CUdevice dev, size_t size)
{
    size_t total = fc_current_platform()->gpu[dev].memory;
    size_t cur = atomic_load(&used[dev]);
    do {
        if (size > total || cur > total - size) return false;
    } while (!atomic_compare_exchange_weak(&used[dev], &cur, cur + size));
    atomic_store(&in_use[dev], 1);
    publish_use();
    return true;
}

void fc_mem_unreserve(CUdevice dev, size_t size)
{
    atomic_fetch_sub(&used[dev], size);
    publish_use();
}

size_t fc_mem_used(CUdevice dev) { return atomic_load(&used[dev]); }

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

CUresult fc_device_alloc(CUdevice dev, size_t size, CUdeviceptr *out)
{
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    size_t bytes = round_up(size, 4096);
    if (!fc_mem_reserve(dev, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    int fd;
    void *p;
    char name[32];
    snprintf(name, sizeof name, "ncclsim-device-d%d", (int)dev);
    if (fc_memfd_map(bytes, 0, name, &fd, &p) != 0) {
        fc_mem_unreserve(dev, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    fc_alloc a = {.base = (uintptr_t)p, .size = bytes, .kind = FC_MEM_DEVICE, .device = dev,
                  .fd = fd, .counted = true};
    fc_registry_add(&a);
    *out = (CUdeviceptr)p;
    return CUDA_SUCCESS;
}

static void release(const fc_alloc *a)
{
    munmap((void *)a->base, a->size);
    if (a->fd >= 0) close(a->fd);
    if (a->counted) fc_mem_unreserve(a->device, a->size);
}

CUresult fc_device_free(CUdeviceptr p)
{
    fc_alloc a;
    if (!fc_registry_find(p, &a) || a.base != p ||
        (a.kind != FC_MEM_DEVICE && a.kind != FC_MEM_MANAGED))
        return CUDA_ERROR_INVALID_VALUE;
    if (!fc_registry_remove(p, &a)) return CUDA_ERROR_INVALID_VALUE;
    release(&a);
    return CUDA_SUCCESS;
}

static CUresult current_device(CUdevice *dev)
{
    CUcontext c;
    CUresult r = fc_ctx_current_checked(&c);
    if (r == CUDA_SUCCESS) *dev = c->device;
    return r;
}

/* ---- device memory ---- */

FC_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    REQUIRE_INIT();
    CUdevice dev;
    if (!dptr) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CUresult r = current_device(&dev);
    if (r == CUDA_SUCCESS) r = fc_device_alloc(dev, bytesize, dptr);
    API_RETURN(r, "\"bytes\":%zu,\"ptr\":\"0x%llx\"", bytesize, r ? 0ull : (unsigned long long)*dptr);
}

FC_API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    (void)dptr; (void)bytesize;
    /* 32-bit device pointers cannot hold our addresses. */
    API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "\"bytes\":%u", bytesize);
}

FC_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t width, size_t height,
                                   unsigned int elementSize)
{
    REQUIRE_INIT();
    CUdevice dev;
    if (!dptr || !pPitch || !width || !height || (elementSize != 4 && elementSize != 8 && elementSize != 16))
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    size_t pitch = round_up(width, 512);
    CUresult r = current_device(&dev);
    if (r == CUDA_SUCCESS) r = fc_device_alloc(dev, pitch * height, dptr);
    if (r == CUDA_SUCCESS) *pPitch = pitch;
    API_RETURN(r, "\"width\":%zu,\"height\":%zu", width, height);
}

FC_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    REQUIRE_INIT();
    if (dptr == 0) API_RETURN(CUDA_SUCCESS, "\"ptr\":\"0x0\"");
    API_RETURN(fc_device_free(dptr), "\"ptr\":\"0x%llx\"", (unsigned long long)dptr);
}

FC_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    REQUIRE_INIT();
    CUdevice dev;
    if (!dptr || !bytesize) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CUresult r = current_device(&dev);
    if (r == CUDA_SUCCESS) r = fc_device_alloc(dev, bytesize, dptr);
    if (r == CUDA_SUCCESS) {
        fc_alloc a;
        fc_registry_remove(*dptr, &a);
        a.kind = FC_MEM_MANAGED;
        a.flags = flags;
        fc_registry_add(&a);
    }
    API_RETURN(r, "\"bytes\":%zu,\"flags\":%u", bytesize, flags);
}

FC_API CUresult cuMemGetInfo_v2(size_t *free_, size_t *total)
{
    REQUIRE_INIT();
    CUdevice dev;
    CUresult r = current_device(&dev);
    if (r != CUDA_SUCCESS) API_RETURN(r, "");
    size_t t = fc_current_platform()->gpu[dev].memory, u = fc_mem_used(dev);
    if (free_) *free_ = t - u;
    if (total) *total = t;
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d,\"free\":%zu,\"total\":%zu", dev, t - u, t);
}

FC_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    REQUIRE_INIT();
    fc_alloc a;
    if (!fc_registry_find(dptr, &a) || a.kind == FC_MEM_HOST_REGISTERED)
        API_RETURN(CUDA_ERROR_NOT_FOUND, "\"ptr\":\"0x%llx\"", (unsigned long long)dptr);
    if (pbase) *pbase = a.base;
    if (psize) *psize = a.size;
    API_RETURN(CUDA_SUCCESS, "\"ptr\":\"0x%llx\",\"base\":\"0x%lx\",\"size\":%zu",
               (unsigned long long)dptr, (unsigned long)a.base, a.size);
}

/* ---- host memory ---- */

static CUresult host_alloc(void **pp, size_t size, unsigned flags)
{
    if (!pp || !size) return CUDA_ERROR_INVALID_VALUE;
    CUcontext c;
    CUresult r = fc_ctx_current_checked(&c);
    if (r != CUDA_SUCCESS) return r;
    int fd;
    void *p;
    size_t bytes = round_up(size, 4096);
    if (fc_memfd_map(bytes, 0, "ncclsim-host", &fd, &p) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    fc_alloc a = {.base = (uintptr_t)p, .size = bytes, .kind = FC_MEM_HOST_ALLOC,
                  .device = c->device, .fd = fd, .flags = flags};
    fc_registry_add(&a);
    *pp = p;
    return CUDA_SUCCESS;
}

FC_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
    REQUIRE_INIT();
    CUresult r = host_alloc(pp, bytesize, flags);
    API_RETURN(r, "\"bytes\":%zu,\"flags\":%u", bytesize, flags);
}

FC_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    REQUIRE_INIT();
    API_RETURN(host_alloc(pp, bytesize, 0), "\"bytes\":%zu", bytesize);
}

FC_API CUresult cuMemAllocHost(void **pp, unsigned int bytesize)
{
    return cuMemAllocHost_v2(pp, bytesize);
}

FC_API CUresult cuMemFreeHost(void *p)
{
    REQUIRE_INIT();
    if (!p) API_RETURN(CUDA_SUCCESS, "\"ptr\":null"); /* as cudaFreeHost(NULL): nothing to free */
    fc_alloc a;
    if (!fc_registry_find((uintptr_t)p, &a) || a.base != (uintptr_t)p || a.kind != FC_MEM_HOST_ALLOC || a.handle)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"ptr\":\"%p\"", p); /* a.handle: host memory of cuMemCreate */
    fc_registry_remove(a.base, &a);
    release(&a);
    API_RETURN(CUDA_SUCCESS, "\"ptr\":\"%p\"", p);
}

FC_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags)
{
    REQUIRE_INIT();
    CUcontext c;
    if (!p || !bytesize) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    CUresult r = fc_ctx_current_checked(&c);
    if (r != CUDA_SUCCESS) API_RETURN(r, "");
    if (fc_registry_overlaps((uintptr_t)p, bytesize))
        API_RETURN(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "\"ptr\":\"%p\"", p);
    fc_alloc a = {.base = (uintptr_t)p, .size = bytesize, .kind = FC_MEM_HOST_REGISTERED,
                  .device = c->device, .fd = -1, .flags = flags};
    fc_registry_add(&a);
    API_RETURN(CUDA_SUCCESS, "\"ptr\":\"%p\",\"bytes\":%zu,\"flags\":%u", p, bytesize, flags);
}

FC_API CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int flags)
{
    return cuMemHostRegister_v2(p, bytesize, flags);
}

FC_API CUresult cuMemHostUnregister(void *p)
{
    REQUIRE_INIT();
    fc_alloc a;
    if (!fc_registry_find((uintptr_t)p, &a) || a.base != (uintptr_t)p ||
        a.kind != FC_MEM_HOST_REGISTERED)
        API_RETURN(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "\"ptr\":\"%p\"", p);
    fc_registry_remove(a.base, NULL);
    API_RETURN(CUDA_SUCCESS, "\"ptr\":\"%p\"", p);
}

FC_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
    REQUIRE_INIT();
    fc_alloc a;
    if (!pdptr || flags != 0) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!fc_registry_find((uintptr_t)p, &a) ||
        (a.kind != FC_MEM_HOST_ALLOC && a.kind != FC_MEM_HOST_REGISTERED))
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"ptr\":\"%p\"", p);
    *pdptr = (CUdeviceptr)p; /* identity mapped */
    API_RETURN(CUDA_SUCCESS, "\"ptr\":\"%p\"", p);
}

FC_API CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    REQUIRE_INIT();
    fc_alloc a;
    if (!pFlags) API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    if (!fc_registry_find((uintptr_t)p, &a) ||
        (a.kind != FC_MEM_HOST_ALLOC && a.kind != FC_MEM_HOST_REGISTERED))
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"ptr\":\"%p\"", p);
    *pFlags = a.flags;
    API_RETURN(CUDA_SUCCESS, "\"ptr\":\"%p\"", p);
}

/* ---- hints that need no action on host memory ---- */

FC_API CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
    REQUIRE_INIT();
    fc_alloc a;
    if (!fc_registry_find(devPtr, &a) || a.kind != FC_MEM_MANAGED)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "");
    API_RETURN(CUDA_SUCCESS, "\"count\":%zu,\"advice\":%d,\"dev\":%d", count, advice, device);
}

FC_API CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                               CUmemLocation location)
{
    return cuMemAdvise(devPtr, count, advice, location.id);
}
