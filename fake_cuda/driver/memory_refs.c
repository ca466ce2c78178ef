/* Memory of other processes of the host: their descriptors reached through
 * /proc/<pid>/fd (IPC handles, multicast members, references), and
 * references to simulated memory (device_link.h), with which a step of
 * NCCL's protocol names its bytes instead of carrying a copy. A reference
 * names the file that backs the bytes (a process that holds it open, its
 * descriptor, and the file's inode to recognise it) and the offset in it;
 * and where the bytes are in the process that wrote the reference, which
 * reads them there. Another process maps that file once (writable where
 * the file opens so, for steps delivered into a reader's output): the
 * mappings are kept for later steps, up to MAX_MAPS of them; one not in use
 * goes when its descriptor names another file or to make room. A kept
 * mapping keeps its file's memory alive after its owner frees it, until
 * then.
 *
 * The first access to each page of a mapping is a fault, a few microseconds
 * each on a virtual machine whether or not the page exists yet: a large
 * step's range is populated in one call instead (madvise MADV_POPULATE_*,
 * Linux 5.14), once per chunk of the mapping. Only what the step reads or
 * writes anyway is populated. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

int fc_peer_fd_open(int32_t pid, int32_t fd, int flags)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)fd);
    return open(path, flags | O_CLOEXEC);
}

/* getpid() is a system call, and references are made and followed on every
 * large step: the pid is read once, and again in a forked child. */
static int32_t self_pid;
static pthread_once_t self_once = PTHREAD_ONCE_INIT;
static void read_self(void) { self_pid = getpid(); }
static void self_init(void)
{
    read_self();
    pthread_atfork(NULL, NULL, read_self);
}

int32_t fc_mem_ref_self(void)
{
    pthread_once(&self_once, self_init);
    return self_pid;
}

bool fc_mem_ref_make(uintptr_t addr, size_t len, fc_mem_ref *out)
{
    uint64_t zero_off;
    if (len && fc_zero_offset(addr, &zero_off)) { /* a stand-in's zeros: no file, each reader has its own */
        int32_t self = fc_mem_ref_self();
        *out = (fc_mem_ref){.pid = self, .fd = -1, .offset = zero_off, .local_pid = self, .addr = addr};
        return true;
    }
    fc_alloc a;
    if (!len || !fc_registry_find(addr, &a) || a.kind == FC_MEM_MULTICAST || a.fd < 0 || !a.ino ||
        addr + len > a.base + a.size)
        return false;
    int32_t self = fc_mem_ref_self();
    *out = (fc_mem_ref){.pid = self, .fd = a.fd, .ino = a.ino & ~FC_FILE_INODES,
                        .offset = a.offset + (addr - a.base), .local_pid = self, .addr = addr};
    return true;
}

enum { MAX_MAPS = 64 };

#ifndef MADV_POPULATE_READ /* headers older than Linux 5.14 */
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif
/* Accesses this large are populated, by chunks of this size (the part of a
 * chunk outside the access is populated too: at most a chunk's worth at
 * each end, which the neighbouring steps of a collective touch anyway). */
#define POPULATE_MIN_BYTES ((size_t)64 << 10)
#define POPULATE_CHUNK ((size_t)64 << 10)

typedef struct {
    int32_t pid, fd;
    uint64_t ino;
    char *base;      /* NULL: a free entry */
    size_t len;
    bool writable;
    int users;       /* readers between open and release */
    uint64_t used;   /* when last opened, for choosing one to drop */
    uint64_t *populated; /* a bit per chunk, set once asked for; NULL: never populate */
} peer_map;

static peer_map maps[MAX_MAPS];
static uint64_t clock_;
static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;

/* The entry to (re)use for (pid, fd): the one that had it (its file
 * changed) unless it is being read, else a free one, else the least
 * recently used that nobody reads; NULL when all are being read. */
static peer_map *entry_for(const fc_mem_ref *r)
{
    peer_map *victim = NULL;
    for (int i = 0; i < MAX_MAPS; i++) {
        peer_map *m = &maps[i];
        if (m->users) continue;
        if (m->base && m->pid == r->pid && m->fd == r->fd) return m;
        if (!m->base) {
            if (!victim || victim->base) victim = m;
        } else if (!victim || (victim->base && m->used < victim->used)) {
            victim = m;
        }
    }
    return victim;
}

static bool map_file(peer_map *m, const fc_mem_ref *r)
{
    if (m->base) munmap(m->base, m->len);
    free(m->populated);
    m->base = NULL;
    m->populated = NULL;
    bool writable = true;
    int fd = fc_peer_fd_open(r->pid, r->fd, O_RDWR);
    if (fd < 0) {
        writable = false;
        fd = fc_peer_fd_open(r->pid, r->fd, O_RDONLY);
    }
    if (fd < 0) return false;
    struct stat st;
    bool same = fstat(fd, &st) == 0 && (uint64_t)st.st_ino == r->ino && st.st_size > 0;
    int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
    void *p = same ? mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) return false;
    size_t chunks = ((size_t)st.st_size + POPULATE_CHUNK - 1) / POPULATE_CHUNK;
    *m = (peer_map){.pid = r->pid, .fd = r->fd, .ino = r->ino, .base = p, .len = (size_t)st.st_size,
                    .writable = writable, .populated = calloc((chunks + 63) / 64, sizeof(uint64_t))};
    return true;
}

static bool populate_works = true; /* false once the kernel refused the advice */

/* With maps_lock held: the part of [offset, offset+len) of m not populated
 * yet, from its first such chunk to its last, marked as populated (its
 * populating comes after the lock is released); false: nothing to do. */
static bool claim_chunks(peer_map *m, uint64_t offset, size_t len, size_t *from, size_t *to)
{
    if (len < POPULATE_MIN_BYTES || !m->populated || !__atomic_load_n(&populate_works, __ATOMIC_RELAXED))
        return false;
    size_t first = SIZE_MAX, last = 0;
    for (size_t c = offset / POPULATE_CHUNK; c <= (offset + len - 1) / POPULATE_CHUNK; c++) {
        uint64_t bit = 1ull << (c % 64);
        if (m->populated[c / 64] & bit) continue;
        m->populated[c / 64] |= bit;
        if (first == SIZE_MAX) first = c;
        last = c;
    }
    if (first == SIZE_MAX) return false;
    static size_t page; /* read once (maps_lock is held) */
    if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
    size_t end = (last + 1) * POPULATE_CHUNK;
    *from = first * POPULATE_CHUNK;
    *to = (end < m->len ? end : m->len) / page * page; /* whole pages inside the file */
    return *to > *from;
}

/* A failure leaves the pages to their faults, as without it. */
static void populate(char *at, size_t bytes, bool write)
{
    if (madvise(at, bytes, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) != 0 && errno == EINVAL)
        __atomic_store_n(&populate_works, false, __ATOMIC_RELAXED);
}

static void *open_ref(const fc_mem_ref *r, size_t len, bool write, void **hold)
{
    *hold = NULL;
    if (r->local_pid == fc_mem_ref_self()) return (void *)(uintptr_t)r->addr;
    if (r->fd < 0) return write ? NULL : (void *)(uintptr_t)fc_zero_at(r->offset, len);
    pthread_mutex_lock(&maps_lock);
    peer_map *m = NULL;
    for (int i = 0; i < MAX_MAPS && !m; i++)
        if (maps[i].base && maps[i].pid == r->pid && maps[i].fd == r->fd && maps[i].ino == r->ino) m = &maps[i];
    if (!m && (m = entry_for(r)) && !map_file(m, r)) m = NULL;
    void *at = NULL;
    size_t from = 0, to = 0;
    bool fill = false;
    if (m && r->offset + len <= m->len && (m->writable || !write)) {
        m->users++; /* which also keeps the mapping while it is populated */
        m->used = ++clock_;
        *hold = m;
        at = m->base + r->offset;
        fill = claim_chunks(m, r->offset, len, &from, &to);
    }
    pthread_mutex_unlock(&maps_lock);
    if (fill) populate(m->base + from, to - from, write);
    return at;
}

const void *fc_mem_ref_open(const fc_mem_ref *r, size_t len, void **hold) { return open_ref(r, len, false, hold); }

void *fc_mem_ref_open_writable(const fc_mem_ref *r, size_t len, void **hold) { return open_ref(r, len, true, hold); }

void fc_mem_ref_release(void *hold)
{
    if (!hold) return;
    pthread_mutex_lock(&maps_lock);
    ((peer_map *)hold)->users--;
    pthread_mutex_unlock(&maps_lock);
}

/* For the net plugin, which loads beside the driver (dlsym on libcuda.so.1):
 * a network message between processes of one machine names its bytes too. */
FC_API bool ncclsim_mem_ref_make(uintptr_t addr, size_t len, fc_mem_ref *out)
{
    return fc_mem_ref_make(addr, len, out);
}
FC_API const void *ncclsim_mem_ref_open(const fc_mem_ref *r, size_t len, void **hold)
{
    return fc_mem_ref_open(r, len, hold);
}
FC_API void ncclsim_mem_ref_release(void *hold) { fc_mem_ref_release(hold); }
