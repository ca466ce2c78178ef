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
 * then. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
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

typedef struct {
    int32_t pid, fd;
    uint64_t ino;
    char *base;      /* NULL: a free entry */
    size_t len;
    bool writable;
    int users;       /* readers between open and release */
    uint64_t used;   /* when last opened, for choosing one to drop */
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
    m->base = NULL;
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
    *m = (peer_map){.pid = r->pid, .fd = r->fd, .ino = r->ino, .base = p, .len = (size_t)st.st_size,
                    .writable = writable};
    return true;
}

static void *open_ref(const fc_mem_ref *r, size_t len, bool write, void **hold)
{
    *hold = NULL;
    if (r->local_pid == fc_mem_ref_self()) return (void *)(uintptr_t)r->addr;
    pthread_mutex_lock(&maps_lock);
    peer_map *m = NULL;
    for (int i = 0; i < MAX_MAPS && !m; i++)
        if (maps[i].base && maps[i].pid == r->pid && maps[i].fd == r->fd && maps[i].ino == r->ino) m = &maps[i];
    if (!m && (m = entry_for(r)) && !map_file(m, r)) m = NULL;
    void *at = NULL;
    if (m && r->offset + len <= m->len && (m->writable || !write)) {
        m->users++;
        m->used = ++clock_;
        *hold = m;
        at = m->base + r->offset;
    }
    pthread_mutex_unlock(&maps_lock);
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
