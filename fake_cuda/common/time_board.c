/* The time board (time_board.h): an open-addressed table of slots, mapped
 * shared from a file, which every process of a host maps. */
#include "time_board.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"

#define ENTRIES (1u << 20) /* = 2^(64-44) */ /* 32 MiB of address space; only touched pages cost memory */
#define PROBES 64

typedef struct {
    _Atomic uint64_t key; /* 0: empty */
    _Atomic uint64_t t[2];
    uint64_t pad;
} entry;

static entry *board;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void map_board(void)
{
    size_t bytes = (size_t)ENTRIES * sizeof(entry);
    const char *path = getenv("NCCLSIM_TIME_BOARD");
    void *p = MAP_FAILED;
    if (path && *path) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0 && ftruncate(fd, (off_t)bytes) == 0)
            p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (fd >= 0) close(fd);
        if (p == MAP_FAILED) fc_log_fatal_config("modelled time: cannot map the time board %s; steps between "
                                         "processes lose their times", path);
    }
    if (p == MAP_FAILED) p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    board = p == MAP_FAILED ? NULL : p;
}

static entry *find(uint64_t key, bool insert)
{
    pthread_once(&once, map_board);
    if (!board || !key) return NULL;
    uint64_t h = (key * 0x9e3779b97f4a7c15ull) >> 44; /* the product's high bits mix every bit of the key */
    for (unsigned i = 0; i < PROBES; i++) {
        entry *e = &board[(h + i) & (ENTRIES - 1)];
        uint64_t k = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
        if (k == key) return e;
        if (k == 0) {
            if (!insert) return NULL;
            uint64_t zero = 0;
            if (__atomic_compare_exchange_n(&e->key, &zero, key, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
                zero == key)
                return e;
        }
    }
    return NULL;
}

uint64_t fc_board_reserve(uint64_t key, uint64_t ready, uint64_t busy)
{
    entry *e = find(key, true);
    if (!e) return ready;
    uint64_t free_at = __atomic_load_n(&e->t[0], __ATOMIC_ACQUIRE), start;
    do start = free_at > ready ? free_at : ready;
    while (!__atomic_compare_exchange_n(&e->t[0], &free_at, start + busy, true, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    return start;
}

uint64_t fc_board_get(uint64_t key, int which)
{
    entry *e = find(key, false);
    return e ? __atomic_load_n(&e->t[which], __ATOMIC_ACQUIRE) : 0;
}

bool fc_board_put(uint64_t key, int which, uint64_t t)
{
    if (!key) return false; /* no simulated memory: nothing to name it by */
    entry *e = find(key, true);
    if (e) {
        __atomic_store_n(&e->t[which], t, __ATOMIC_RELEASE);
        return true;
    }
    static int said;
    if (board && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fc_log_fatal_config("modelled time: the time board is full; some steps lose their times");
    return false;
}
