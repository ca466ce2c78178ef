/* Part of libncclsim-host.so. NCCL keeps, per channel, a structure of 936
 * bytes (2.30) for every rank of the communicator (ncclChannelPeer,
 * ncclCalloc'd) and writes a reference count in each right after allocating
 * them: 15 MB per rank at 1,024 ranks (16 channels), the same bytes in every
 * rank. Its proxy's pool of operations (8 MB of pages written per rank) and
 * structures of its init (28.9 MB and 3.6 MB allocations per rank, holding
 * pointers into themselves) hold the same bytes in every process once placed
 * at the same address (placed_memory.c), and so do, once its init is over,
 * a thousand blocks of 404 KiB per process (a few words written in each
 * structure of 51,200 bytes: 36 MB of pages per process) and a 1.2 MB
 * structure per rank written with zeros but for 17 pages. On a simulated
 * cluster of hundreds of ranks on one machine that is much of its memory.
 *
 * Here such regions are shared. A large calloc of NCCL's (at least
 * NCCLSIM_SHARED_PAGES_MIN bytes, 256 KiB) is placed, or else starts on a
 * page of its own, and is noted (nccl_allocations.c; pending_regions.c says
 * when it is looked at). A region with data in at least half its pages, or
 * a small one (fewer than 128 pages), is looked up by size and hash of its
 * bytes, a large one with data in fewer (pointers) by size and place, in a
 * store that the processes of the run on this machine share
 * (files named NCCLSIM_SHARED_PAGES-<size>-<hash> or -at<address>; launch puts
 * them in /dev/shm):
 *  - a name seen for the first time leaves a marker only;
 *  - seen a second time, the region's bytes are written to that file;
 *  - with a file there, the region is compared with it page by page, and
 *    each run of equal pages is replaced by a private mapping of the file:
 *    every rank reads the same pages, and a page written later is copied for
 *    its writer alone, as any private file mapping's (copy on write); pages
 *    that differ stay the region's own.
 * The bytes a program reads never change. Another thread writing to a region
 * meanwhile could lose its write between the comparison and the
 * replacement, so the region is read-only for that time: such a write
 * faults, the handler here waits for the replacement and returns, and the
 * write is made again, to the new mapping. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/hash_mix.h"
#include "interpose.h"

#define STORE_VARIABLE "NCCLSIM_SHARED_PAGES"
#define MIN_VARIABLE "NCCLSIM_SHARED_PAGES_MIN"
/* NCCL's peer structures of one channel: 936 bytes per rank (2.30), so
 * 256 KiB from 281 ranks on; smaller regions are not worth the hash and the
 * mapping. */
#define DEFAULT_MIN ((size_t)256 << 10)
#define RECENT 16       /* replaced regions a late fault may still hit */
#define HASH_PAGES 4096 /* pages asked about per mincore or pagemap read */
/* A sparse region of at least twice this is shared by its place from this
 * much data on (NCCL's pool of proxy operations: 2,048 pages of data). */
#define PLACED_MIN_PAGES 64

struct region {
    uintptr_t lo, hi;
};

static const char *store;       /* NULL: off */
static size_t share_min = DEFAULT_MIN;
static size_t page_size;


/* A fork waits for a replacement to end (the child would inherit a region
 * read-only, and a lock held by a thread it does not have). */
static pthread_mutex_t replacing = PTHREAD_MUTEX_INITIALIZER;
static void before_fork(void) { pthread_mutex_lock(&replacing); }
static void after_fork(void) { pthread_mutex_unlock(&replacing); }

__attribute__((constructor)) static void read_settings(void)
{
    const char *dir = getenv(STORE_VARIABLE);
    const char *min = getenv(MIN_VARIABLE);
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    if (min && *min) {
        char *end;
        unsigned long long v = strtoull(min, &end, 10);
        if (*end == '\0' && v >= page_size) share_min = (size_t)v;
    }
    if (dir && *dir && pthread_atfork(before_fork, after_fork, after_fork) == 0) store = dir;
}

bool host_share_wanted(size_t bytes) { return store && bytes >= share_min; }

/* ---- a write during a replacement waits for it ---------------------------- */

/* The region being replaced, and the last ones replaced: a write that faulted
 * on one is made again once the replacement is in place (its fault may be
 * handled after that). */
static _Atomic uintptr_t busy_lo, busy_hi;
static struct region recent[RECENT];
static _Atomic unsigned recent_next;
static struct sigaction previous;
static _Atomic unsigned long waited_writes;

/* How many writes faulted during a replacement and were made again after it. */
EXPORT unsigned long ncclsim_shared_pages_waits(void) { return atomic_load(&waited_writes); }

static bool in_recent(uintptr_t a)
{
    for (unsigned i = 0; i < RECENT; i++)
        if (a >= __atomic_load_n(&recent[i].lo, __ATOMIC_ACQUIRE) && a < __atomic_load_n(&recent[i].hi, __ATOMIC_ACQUIRE))
            return true;
    return false;
}

static void on_fault(int sig, siginfo_t *info, void *context)
{
    uintptr_t a = (uintptr_t)info->si_addr;
    if (info->si_code == SEGV_ACCERR) {
        bool waited = false;
        while (a >= atomic_load(&busy_lo) && a < atomic_load(&busy_hi)) {
            syscall(SYS_sched_yield); /* libc's, not idle_wait.c's (which may sleep) */
            waited = true;
        }
        if (waited) atomic_fetch_add(&waited_writes, 1);
        if (waited || in_recent(a)) return;
    }
    /* Not a replacement's: whoever handled SIGSEGV before. */
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, info, context);
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
    } else {
        static const struct sigaction default_action = {.sa_handler = SIG_DFL};
        sigaction(SIGSEGV, &default_action, NULL); /* the access faults again, and the default ends the process */
    }
}

/* Ours first, whoever the program installed since (called under `replacing`). */
static bool handler_in_place(void)
{
    struct sigaction now;
    if (sigaction(SIGSEGV, NULL, &now) != 0) return false;
    if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_fault) return true;
    struct sigaction ours = {.sa_sigaction = on_fault, .sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER};
    sigemptyset(&ours.sa_mask);
    if (sigaction(SIGSEGV, &ours, NULL) != 0) return false;
    previous = now;
    return true;
}

/* ---- the store ------------------------------------------------------------ */

/* The store's files are this library's own: closed without local_sockets.c's
 * look for a listener. */
static void close_file(int fd) { syscall(SYS_close, fd); }

/* The hash of the region's nonzero pages (with their place), and how many
 * there are; -1 where the region is gone. Pages out of memory count as zero
 * (never written: they are; swapped out: then the comparison below finds the
 * difference). `*resident`: how many are in memory, zeros included. */
static long region_hash(const char *lo, size_t pages, uint64_t *hash, long *resident)
{
    unsigned char in[HASH_PAGES];
    size_t words = page_size / sizeof(uint64_t);
    uint64_t h = FC_HASH_SEED ^ pages;
    long written = 0;
    *resident = 0;
    for (size_t first = 0; first < pages; first += HASH_PAGES) {
        size_t k = pages - first < HASH_PAGES ? pages - first : HASH_PAGES;
        if (mincore((void *)(lo + first * page_size), k * page_size, in) != 0) return -1;
        for (size_t i = 0; i < k; i++) {
            const uint64_t *w = (const uint64_t *)(lo + (first + i) * page_size);
            if (!(in[i] & 1)) continue;
            ++*resident;
            if (host_all_zero((const char *)w, page_size)) continue;
            h = fc_hash_mix(h, first + i);
            h = fc_hash_mix(h, fc_hash_words(first + i, w, words));
            written++;
        }
    }
    *hash = h;
    return written;
}

/* How many of the region's pages are in memory; -1 where it is gone. */
static long resident_pages(const char *lo, size_t pages)
{
    unsigned char in[HASH_PAGES];
    long resident = 0;
    for (size_t first = 0; first < pages; first += HASH_PAGES) {
        size_t k = pages - first < HASH_PAGES ? pages - first : HASH_PAGES;
        if (mincore((void *)(lo + first * page_size), k * page_size, in) != 0) return -1;
        for (size_t i = 0; i < k; i++) resident += in[i] & 1;
    }
    return resident;
}

/* Writes the region's nonzero pages to a new file of the store named `name`
 * (the rest is a hole, read as zeros); false where it could not. */
static bool store_bytes(const char *name, const char *lo, size_t bytes)
{
    char temp[4096];
    if (snprintf(temp, sizeof temp, "%s.%d.%d", name, (int)getpid(), (int)gettid()) >= (int)sizeof temp) return false;
    int fd = open(temp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    bool ok = ftruncate(fd, (off_t)bytes) == 0;
    bool held[HASH_PAGES];
    size_t pages = bytes / page_size;
    for (size_t first = 0; ok && first < pages; first += HASH_PAGES) {
        size_t k = pages - first < HASH_PAGES ? pages - first : HASH_PAGES;
        host_pages_held(lo + first * page_size, k, held);
        for (size_t i = 0; ok && i < k; i++) {
            const char *at = lo + (first + i) * page_size;
            if (!held[i] || host_all_zero(at, page_size)) continue;
            ok = pwrite(fd, at, page_size, (off_t)(at - lo)) == (ssize_t)page_size;
        }
    }
    close_file(fd);
    /* link, not rename: where another process stored the same bytes first, its file stays */
    ok = ok && (link(temp, name) == 0 || errno == EEXIST);
    unlink(temp);
    return ok;
}

/* The store's file `name` for the region, opened; -1 where there is none yet
 * (the first time, a marker is left; the second, the file is made). */
static int stored_file(const char *name, const char *lo, size_t bytes)
{
    char marker[4096 + 8];
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) return fd;
    snprintf(marker, sizeof marker, "%s.seen", name);
    int m = open(marker, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (m >= 0) {
        close_file(m);
        return -1;
    }
    if (errno != EEXIST || !store_bytes(name, lo, bytes)) return -1;
    return open(name, O_RDONLY | O_CLOEXEC);
}

/* ---- replacing a region's pages by the store's file ------------------------ */

/* Whether page i of the region equals the file's (`file`: mapped, `data`:
 * the file holds data there, not a hole). A hole is compared without reading
 * it: reading would fill it. */
static bool same_page(const char *lo, const char *file, size_t i, bool held, bool data)
{
    const char *at = lo + i * page_size;
    if (data) return held && memcmp(at, file + i * page_size, page_size) == 0;
    return !held || host_all_zero(at, page_size);
}

/* The file's data extent [*lo, *hi) (bytes) at or after `from`; an empty one
 * past the end where there is no more. */
static void next_data(int fd, off_t from, off_t end, off_t *lo, off_t *hi)
{
    *lo = lseek(fd, from, SEEK_DATA);
    if (*lo < 0) { /* ENXIO: only a hole follows */
        *lo = *hi = end;
        return;
    }
    *hi = lseek(fd, *lo, SEEK_HOLE);
    if (*hi < 0) *hi = end;
}

/* Maps the file (private: copy on write) over each run of the region's pages
 * that equal the file's. */
static void map_equal_runs(char *lo, size_t bytes, int fd, const char *file)
{
    size_t pages = bytes / page_size, run = 0;
    bool held[HASH_PAGES];
    off_t data_lo, data_hi;
    next_data(fd, 0, (off_t)bytes, &data_lo, &data_hi);
    for (size_t i = 0; i <= pages; i++) {
        bool same = false;
        if (i < pages) {
            if (i % HASH_PAGES == 0) host_pages_held(lo + i * page_size, pages - i < HASH_PAGES ? pages - i : HASH_PAGES, held);
            off_t at = (off_t)(i * page_size);
            if (at >= data_hi) next_data(fd, at, (off_t)bytes, &data_lo, &data_hi);
            same = same_page(lo, file, i, held[i % HASH_PAGES], at >= data_lo && at < data_hi);
        }
        if (same) continue;
        if (i > run) {
            /* Past the checks before, the kernel refuses a fixed mapping
             * only for want of memory, possibly after removing the old one:
             * then the bytes are gone, and the process must stop. */
            char *at = lo + run * page_size;
            size_t n = (i - run) * page_size;
            if (mmap(at, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, (off_t)(run * page_size)) != at) {
                static const char msg[] = "ncclsim: mapping shared pages failed; stopping\n";
                if (write(2, msg, sizeof msg - 1) < 0) abort();
                abort();
            }
        }
        run = i + 1;
    }
}

static void replace(char *lo, size_t bytes, int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size != bytes) return;
    void *file = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (file == MAP_FAILED) return;
    pthread_mutex_lock(&replacing);
    if (handler_in_place()) {
        atomic_store(&busy_lo, (uintptr_t)lo);
        atomic_store(&busy_hi, (uintptr_t)lo + bytes);
        if (mprotect(lo, bytes, PROT_READ) == 0) {
            map_equal_runs(lo, bytes, fd, file);
            mprotect(lo, bytes, PROT_READ | PROT_WRITE); /* the pages that stayed the region's own */
            unsigned slot = atomic_fetch_add(&recent_next, 1) % RECENT;
            __atomic_store_n(&recent[slot].hi, 0, __ATOMIC_RELEASE);
            __atomic_store_n(&recent[slot].lo, (uintptr_t)lo, __ATOMIC_RELEASE);
            __atomic_store_n(&recent[slot].hi, (uintptr_t)lo + bytes, __ATOMIC_RELEASE);
        }
        atomic_store(&busy_hi, 0);
        atomic_store(&busy_lo, 0);
    }
    pthread_mutex_unlock(&replacing);
    munmap(file, bytes);
}

/* NCCL may not have written a region yet when it is first looked at (its
 * memory stack zeroes the next allocation with a memset, and only then are
 * the peers written). A region with data in at least half its pages (NCCL's
 * peers: all) is looked up by its bytes, equal wherever it lies; one with a
 * few data pages in many (NCCL's pool of proxy operations, a pointer every 8
 * pages; structures of its init) by its place: its pointers are the same bytes
 * only in the same place (placed_memory.c), and the pages that differ (the
 * operations used so far) stay its own. */
enum shared host_share_region(uintptr_t lo, uintptr_t hi, enum look_time when, long *resident_before)
{
    size_t bytes = hi - lo, pages = bytes / page_size;
    bool placed = host_placed(lo);
    /* A small sparse region (NCCL's blocks of 404 KiB of its init: 8
     * structures of 51,200 bytes, a few words written in each as its init
     * goes on, a thousand per process) is looked up by its bytes (the same
     * block lies in different slots in different processes, whose threads
     * allocate and free in different orders): shared as soon as it stops
     * growing, and again at a launch, once its init is over. */
    bool small = pages < 2 * PLACED_MIN_PAGES;
    if (when == LOOK_EARLY && (placed || small)) { /* a sparse one waits until it stops growing (cheap to tell: no bytes read) */
        long resident = resident_pages((const char *)lo, pages);
        if (resident < 0) return SHARE_DONE;
        bool grew = resident != *resident_before;
        *resident_before = resident;
        if (resident == 0) return SHARE_LATER_UNWRITTEN;
        if (2 * (size_t)resident < pages && (grew || (!small && resident < PLACED_MIN_PAGES))) return SHARE_LATER_SPARSE;
    }
    uint64_t h;
    long resident;
    long written = region_hash((const char *)lo, pages, &h, &resident);
    if (written < 0) return SHARE_DONE;
    if (written == 0) return SHARE_LATER_UNWRITTEN;
    char name[4096];
    int n;
    if (small || 2 * (size_t)written >= pages) /* the same bytes wherever they lie (NCCL's peers) */
        n = snprintf(name, sizeof name, "%s-%zx-%016llx", store, bytes, (unsigned long long)h);
    else if (!placed)
        return SHARE_DONE;
    /* zeros written count once the region is done (NCCL's structures of 1.2 MB
     * per rank: 17 pages of data, 195 written with zeros) */
    else if ((size_t)written >= PLACED_MIN_PAGES || (when != LOOK_EARLY && resident >= PLACED_MIN_PAGES))
        n = snprintf(name, sizeof name, "%s-%zx-at%llx", store, bytes, (unsigned long long)lo);
    else
        return when == LOOK_EARLY ? SHARE_LATER_SPARSE : SHARE_DONE;
    if (n >= (int)sizeof name) return SHARE_DONE;
    int fd = stored_file(name, (const char *)lo, bytes);
    if (fd >= 0) {
        replace((char *)lo, bytes, fd);
        close_file(fd);
    }
    return small && when != LOOK_AT_LAUNCH && 2 * (size_t)resident < pages ? SHARE_AT_LAUNCH : SHARE_DONE;
}
