/* Multicast objects (cuMulticast*): NVSwitch multicast, which NCCL's NVLS
 * algorithms use. On the hardware, a multicast address reaches the memory
 * every member device bound to the object: a store there writes every copy,
 * a multimem load-reduce reads all copies and combines them.
 *
 * Here an object is a small shared memfd (its POSIX-fd handle, which NCCL
 * passes between the processes of a host): the team size, the devices added,
 * and per device the memory it bound (the memfd's descriptor in the binding
 * process, offsets, size). A mapping of the object is address space without
 * pages; the emulation of NCCL's kernels asks fc_multicast_copies for the
 * bound memory behind a multicast address, mapped in its own process through
 * /proc/<pid>/fd, and performs the multimem operations on the copies. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vmm_handle.h"

#define MC_MAGIC 0x6d637374u /* "mcst" */
#define MC_NAME "ncclsim-multicast"
#define MC_GRANULARITY FC_VMM_GRANULARITY /* minimum and recommended: the allocation granularity */

/* One binding of memory to a range of the object, in the shared state. */
typedef struct {
    int32_t pid, fd; /* the bound memory: memfd `fd` of process `pid`; pid 0: slot free */
    uint32_t generation; /* changes with every bind and unbind of this slot */
    uint64_t mem_offset, mc_offset, size;
} mc_binding;

#define MC_MAX_BINDINGS 32 /* per device: NCCL binds its credits, buffers and registered buffers */

typedef struct {
    uint32_t pci; /* the device's bus id, packed (mc_device_key); 0: slot free */
    mc_binding bind[MC_MAX_BINDINGS];
} mc_member;

typedef struct {
    uint32_t magic;
    uint32_t ndev;   /* CUmulticastObjectProp.numDevices */
    uint64_t size;   /* bytes of the object's range */
    uint32_t lock;   /* spin lock over the members */
    uint32_t added;  /* members added so far */
    mc_member dev[FC_MAX_GPUS];
} mc_shared;

/* What one process keeps of an object: its view of the shared state, its
 * own mappings of the members' bound memory, and the memory it bound. */
typedef struct {
    void *base; /* this process's mapping of the binding's memory */
    size_t len;
    uint32_t generation;
    uint64_t ino, mem_offset; /* the bound memfd's inode, where the mapping starts in it */
    fc_vmm_handle *mine; /* memory this process bound (held until unbound) */
} mc_local_binding;

struct fc_mc_local {
    mc_shared *sh;
    pthread_mutex_t lock;
    mc_local_binding map[FC_MAX_GPUS][MC_MAX_BINDINGS];
};

static void sh_lock(mc_shared *sh)
{
    while (__atomic_exchange_n(&sh->lock, 1, __ATOMIC_ACQUIRE)) sched_yield();
}
static void sh_unlock(mc_shared *sh) { __atomic_store_n(&sh->lock, 0, __ATOMIC_RELEASE); }

static uint32_t mc_device_key(CUdevice dev)
{
    const fc_pci_addr *a = &fc_current_platform()->gpu[dev].pci;
    return 0x80000000u | (a->domain & 0x7fff) << 16 | (a->bus & 0xff) << 8 | (a->device & 0x1f) << 3 | (a->function & 7);
}

static void mc_free(fc_vmm_handle *v)
{
    struct fc_mc_local *mc = v->mc;
    for (int i = 0; i < FC_MAX_GPUS; i++)
        for (int k = 0; k < MC_MAX_BINDINGS; k++) {
            if (mc->map[i][k].base) munmap(mc->map[i][k].base, mc->map[i][k].len);
            if (mc->map[i][k].mine) fc_vmm_handle_unref(mc->map[i][k].mine);
        }
    munmap(mc->sh, sizeof *mc->sh);
    pthread_mutex_destroy(&mc->lock);
    free(mc);
}

static fc_vmm_handle *mc_handle(int fd, const CUmemAllocationProp *prop, size_t size)
{
    mc_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (sh == MAP_FAILED) return NULL;
    struct fc_mc_local *mc = calloc(1, sizeof *mc);
    fc_vmm_handle *v = mc ? fc_vmm_handle_new(fd, size, prop, false) : NULL;
    if (!v) {
        free(mc);
        munmap(sh, sizeof *sh);
        return NULL;
    }
    mc->sh = sh;
    pthread_mutex_init(&mc->lock, NULL);
    v->mc = mc;
    v->on_free = mc_free;
    return v;
}


static bool multicast_capable(CUdevice dev)
{
    bool known;
    return fc_device_attribute(dev, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, &known) == 1;
}

FC_API CUresult cuMulticastGetGranularity(size_t *granularity, const CUmulticastObjectProp *prop,
                                          CUmulticastGranularity_flags option)
{
    REQUIRE_INIT();
    if (!granularity || !prop || (option != CU_MULTICAST_GRANULARITY_MINIMUM &&
                                  option != CU_MULTICAST_GRANULARITY_RECOMMENDED))
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"option\":%d", option);
    *granularity = MC_GRANULARITY;
    API_RETURN(CUDA_SUCCESS, "\"option\":%d,\"granularity\":%u", option, MC_GRANULARITY);
}

FC_API CUresult cuMulticastCreate(CUmemGenericAllocationHandle *mcHandle, const CUmulticastObjectProp *prop)
{
    REQUIRE_INIT();
    CUcontext ctx;
    CUresult r = fc_ctx_current_checked(&ctx);
    if (r != CUDA_SUCCESS) API_RETURN(r, "");
    if (!multicast_capable(ctx->device)) API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "\"dev\":%d", ctx->device);
    if (!mcHandle || !prop || !prop->size || prop->size % MC_GRANULARITY || prop->flags ||
        prop->numDevices < 1 || (int)prop->numDevices > fc_device_count())
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"numDevices\":%u,\"size\":%zu", prop ? prop->numDevices : 0,
                   prop ? prop->size : 0);
    if (prop->handleTypes & ~(unsigned long long)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "\"handleTypes\":%llu", prop->handleTypes);
    int fd = memfd_create(MC_NAME, MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, sizeof(mc_shared)) != 0) {
        if (fd >= 0) close(fd);
        API_RETURN(CUDA_ERROR_OUT_OF_MEMORY, "\"errno\":%d", errno);
    }
    CUmemAllocationProp mprop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .requestedHandleTypes = (CUmemAllocationHandleType)prop->handleTypes,
                                 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = ctx->device}};
    fc_vmm_handle *v = mc_handle(fd, &mprop, prop->size);
    if (!v) {
        close(fd);
        API_RETURN(CUDA_ERROR_OUT_OF_MEMORY, "");
    }
    v->mc->sh->ndev = prop->numDevices;
    v->mc->sh->size = prop->size;
    __atomic_store_n(&v->mc->sh->magic, MC_MAGIC, __ATOMIC_RELEASE);
    *mcHandle = (CUmemGenericAllocationHandle)(uintptr_t)v;
    API_RETURN(CUDA_SUCCESS, "\"numDevices\":%u,\"size\":%zu", prop->numDevices, prop->size);
}

fc_vmm_handle *fc_mc_import(int fd)
{
    char path[64], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0) return NULL;
    target[n] = 0;
    if (!strstr(target, MC_NAME)) return NULL;
    int mine = dup(fd); /* the caller closes its descriptor */
    if (mine < 0) return NULL;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    fc_vmm_handle *v = mc_handle(mine, &prop, 0);
    if (!v || __atomic_load_n(&v->mc->sh->magic, __ATOMIC_ACQUIRE) != MC_MAGIC) {
        if (v) fc_vmm_handle_unref(v);
        else close(mine);
        return NULL;
    }
    v->size = v->mc->sh->size;
    return v;
}

static int member_of(const mc_shared *sh, uint32_t key)
{
    for (uint32_t i = 0; i < sh->ndev && i < FC_MAX_GPUS; i++)
        if (sh->dev[i].pci == key) return (int)i;
    return -1;
}

FC_API CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle, CUdevice dev)
{
    REQUIRE_INIT();
    fc_vmm_handle *v = fc_vmm_handle_of(mcHandle);
    if (!v || !v->mc) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"dev\":%d", dev);
    if (!fc_valid_device(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "\"dev\":%d", dev);
    if (!multicast_capable(dev)) API_RETURN(CUDA_ERROR_NOT_SUPPORTED, "\"dev\":%d", dev);
    mc_shared *sh = v->mc->sh;
    uint32_t key = mc_device_key(dev);
    sh_lock(sh);
    const char *problem = member_of(sh, key) >= 0 ? "already added" : sh->added >= sh->ndev ? "team full" : NULL;
    if (!problem) {
        sh->dev[sh->added].pci = key;
        __atomic_store_n(&sh->added, sh->added + 1, __ATOMIC_RELEASE);
    }
    uint32_t added = sh->added;
    sh_unlock(sh);
    if (problem) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"dev\":%d,\"reason\":\"%s\"", dev, problem);
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d,\"added\":%u,\"numDevices\":%u", dev, added, sh->ndev);
}

/* Binds block until the whole team was added (as the driver documents). */
static void wait_team(const mc_shared *sh)
{
    struct timespec ms = {0, 1000000};
    while (__atomic_load_n(&sh->added, __ATOMIC_ACQUIRE) < sh->ndev) nanosleep(&ms, NULL);
}

static CUresult bind(fc_vmm_handle *v, size_t mcOffset, CUdevice dev, fc_vmm_handle *mem, int fd, size_t memOffset,
                     size_t size, const char **why)
{
    mc_shared *sh = v->mc->sh;
    if (!size || size % MC_GRANULARITY || mcOffset % MC_GRANULARITY || memOffset % MC_GRANULARITY ||
        mcOffset + size > sh->size) {
        *why = "size or offset";
        return CUDA_ERROR_INVALID_VALUE;
    }
    int i = member_of(sh, mc_device_key(dev));
    if (i < 0) {
        *why = "device not added";
        return CUDA_ERROR_INVALID_DEVICE;
    }
    wait_team(sh);
    struct fc_mc_local *mc = v->mc;
    pthread_mutex_lock(&mc->lock);
    sh_lock(sh);
    CUresult r = CUDA_SUCCESS;
    mc_member *m = &sh->dev[i];
    int free_slot = -1;
    for (int k = 0; k < MC_MAX_BINDINGS; k++) {
        const mc_binding *b = &m->bind[k];
        if (!b->pid) {
            if (free_slot < 0) free_slot = k;
        } else if (mcOffset < b->mc_offset + b->size && b->mc_offset < mcOffset + size) {
            *why = "range already bound";
            r = CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (r == CUDA_SUCCESS && free_slot < 0) {
        *why = "too many bindings";
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS) {
        mc_binding *b = &m->bind[free_slot];
        b->fd = fd;
        b->mem_offset = memOffset;
        b->mc_offset = mcOffset;
        b->size = size;
        b->generation++;
        __atomic_store_n(&b->pid, (int32_t)getpid(), __ATOMIC_RELEASE);
        fc_vmm_handle_ref(mem);
        mc->map[i][free_slot].mine = mem;
    }
    sh_unlock(sh);
    pthread_mutex_unlock(&mc->lock);
    return r;
}

FC_API CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                   CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
                                   unsigned long long flags)
{
    REQUIRE_INIT();
    fc_vmm_handle *v = fc_vmm_handle_of(mcHandle), *mem = fc_vmm_handle_of(memHandle);
    if (!v || !v->mc || !mem || mem->mc || flags || memOffset + size > mem->size ||
        mem->prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"size\":%zu", size);
    const char *why = "";
    CUresult r = bind(v, mcOffset, mem->prop.location.id, mem, mem->fd, memOffset, size, &why);
    if (r != CUDA_SUCCESS) API_RETURN(r, "\"size\":%zu,\"reason\":\"%s\"", size, why);
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d,\"mcOffset\":%zu,\"size\":%zu", mem->prop.location.id, mcOffset, size);
}

FC_API CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr,
                                    size_t size, unsigned long long flags)
{
    REQUIRE_INIT();
    fc_vmm_handle *v = fc_vmm_handle_of(mcHandle);
    fc_alloc a;
    if (!v || !v->mc || flags || !fc_registry_find(memptr, &a) || memptr + size > a.base + a.size)
        API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"ptr\":\"0x%llx\"", (unsigned long long)memptr);
    /* Memory of cuMemCreate mapped here; the handle keeps the memfd open while bound. */
    fc_vmm_handle *mem = a.kind == FC_MEM_VMM_MAPPED ? a.handle : NULL;
    if (!mem) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"ptr\":\"0x%llx\",\"reason\":\"not cuMemCreate memory\"",
                         (unsigned long long)memptr);
    const char *why = "";
    CUresult r = bind(v, mcOffset, a.device, mem, mem->fd, a.offset + (memptr - a.base), size, &why);
    if (r != CUDA_SUCCESS) API_RETURN(r, "\"ptr\":\"0x%llx\",\"reason\":\"%s\"", (unsigned long long)memptr, why);
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d,\"ptr\":\"0x%llx\",\"size\":%zu", a.device, (unsigned long long)memptr,
               size);
}

FC_API CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, size_t size)
{
    REQUIRE_INIT();
    fc_vmm_handle *v = fc_vmm_handle_of(mcHandle);
    if (!v || !v->mc) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"dev\":%d", dev);
    if (!fc_valid_device(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE, "\"dev\":%d", dev);
    struct fc_mc_local *mc = v->mc;
    mc_shared *sh = mc->sh;
    int i = member_of(sh, mc_device_key(dev));
    pthread_mutex_lock(&mc->lock);
    sh_lock(sh);
    bool ok = false;
    fc_vmm_handle *mine = NULL;
    for (int k = 0; i >= 0 && k < MC_MAX_BINDINGS && !ok; k++) {
        mc_binding *b = &sh->dev[i].bind[k];
        if (b->pid != (int32_t)getpid() || b->mc_offset != mcOffset || b->size != size) continue;
        ok = true;
        b->pid = 0;
        b->generation++;
        fc_sim_memory_changed();
        mine = mc->map[i][k].mine;
        mc->map[i][k].mine = NULL;
    }
    sh_unlock(sh);
    pthread_mutex_unlock(&mc->lock);
    if (!ok) API_RETURN(CUDA_ERROR_INVALID_VALUE, "\"dev\":%d,\"reason\":\"not bound here\"", dev);
    if (mine) fc_vmm_handle_unref(mine);
    API_RETURN(CUDA_SUCCESS, "\"dev\":%d,\"size\":%zu", dev, size);
}

/* ---- for the emulation (device_link.h) ---- */

/* The file behind a member's memory: the binding process's descriptor,
 * its inode, and where byte `off` of the object is in it. */
typedef struct {
    int32_t pid, fd;
    uint64_t ino, offset;
} mc_file;

/* Member i's binding that covers [off, off+len) of the object, mapped in
 * this process ((re)made when the binding changed): its memory at off (and
 * the file behind it), or NULL while nothing is bound there. Called with
 * mc->lock held. */
static char *member_memory(struct fc_mc_local *mc, int i, size_t off, size_t len, mc_file *file)
{
    for (int k = 0; k < MC_MAX_BINDINGS; k++) {
        sh_lock(mc->sh);
        mc_binding now = mc->sh->dev[i].bind[k];
        sh_unlock(mc->sh);
        if (!now.pid || off < now.mc_offset || off + len > now.mc_offset + now.size) continue;
        mc_local_binding *lb = &mc->map[i][k];
        if (!lb->base || lb->generation != now.generation) {
            if (lb->base) {
                fc_sim_memory_changed(); /* views of the old binding are stale */
                munmap(lb->base, lb->len);
            }
            lb->base = NULL;
            int fd = fc_peer_fd_open(now.pid, now.fd, O_RDWR);
            if (fd < 0) return NULL;
            void *p = mmap(NULL, now.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)now.mem_offset);
            struct stat st;
            lb->ino = fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
            close(fd);
            if (p == MAP_FAILED) return NULL;
            lb->base = p;
            lb->len = now.size;
            lb->generation = now.generation;
            lb->mem_offset = now.mem_offset;
        }
        *file = (mc_file){now.pid, now.fd, lb->ino, lb->mem_offset + (off - now.mc_offset)};
        return (char *)lb->base + (off - now.mc_offset);
    }
    return NULL;
}

/* The views handed out, by the address asked about, kept until its mapping
 * goes: kernels hold them while they run. */
typedef struct mc_view_entry {
    uintptr_t base;
    fc_mc_view view;
    struct mc_view_entry *next;
} mc_view_entry;
static mc_view_entry *views;
static pthread_mutex_t views_lock = PTHREAD_MUTEX_INITIALIZER;

void fc_mc_unmapped(uintptr_t base, size_t size)
{
    /* (the range left the registry first, which moved fc_sim_memory_generation) */
    pthread_mutex_lock(&views_lock);
    for (mc_view_entry **pe = &views; *pe;) {
        mc_view_entry *e = *pe;
        if (e->base >= base && e->base - base < size) {
            *pe = e->next;
            free(e);
        } else {
            pe = &e->next;
        }
    }
    pthread_mutex_unlock(&views_lock);
}

int fc_multicast_view(uintptr_t addr, size_t len, const fc_mc_view **out)
{
    fc_alloc a;
    if (!fc_registry_find(addr, &a) || a.kind != FC_MEM_MULTICAST) return 0;
    if (addr + len > a.base + a.size) return -1;
    struct fc_mc_local *mc = ((fc_vmm_handle *)a.handle)->mc;
    fc_mc_view view = {.n = (int)mc->sh->ndev};
    if (view.n > FC_MC_MAX_TEAM) return -1;
    size_t off = a.offset + (addr - a.base); /* in the object */
    pthread_mutex_lock(&mc->lock);
    for (int i = 0; i < view.n; i++) {
        mc_file f;
        char *mem = member_memory(mc, i, off, len, &f);
        if (!mem) {
            pthread_mutex_unlock(&mc->lock);
            return -1;
        }
        view.delta[i] = (intptr_t)((uintptr_t)mem - addr);
        uint64_t key = fc_memory_key(f.ino, f.offset);
        view.key_delta[i] = key ? (int64_t)(key - addr) : 0;
        view.pid[i] = f.pid;
        view.fd[i] = f.fd;
        view.ino[i] = f.ino;
        view.file_delta[i] = (int64_t)f.offset - (int64_t)addr;
    }
    pthread_mutex_unlock(&mc->lock);
    /* One view per multicast address: a head's buffer and its credits are
     * different addresses, and so different bindings, of one object. */
    uintptr_t key = addr;
    pthread_mutex_lock(&views_lock);
    mc_view_entry *e = views;
    while (e && e->base != key) e = e->next;
    if (!e && (e = calloc(1, sizeof *e))) {
        e->base = key;
        e->next = views;
        views = e;
    }
    if (e) e->view = view; /* the same values while the bindings stay */
    pthread_mutex_unlock(&views_lock);
    if (!e) return -1;
    *out = &e->view;
    return 1;
}
