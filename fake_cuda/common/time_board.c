/* The time board (time_board.h): an open-addressed table of slots, mapped
 * shared from a file, which every process of a host maps. */
#include "time_board.h"

#include <pthread.h>
#include <stddef.h>
#include <sched.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "host_file.h"
#include "key_table.h"
#include "log.h"

#define ENTRY_BITS 20
#define ENTRIES (1u << ENTRY_BITS) /* 32 MiB of address space; only touched pages cost memory */
#define PROBES 64

typedef struct {
    _Atomic uint64_t key; /* 0: empty */
    _Atomic uint64_t t[2];
    uint64_t pad;
} entry;
_Static_assert(offsetof(entry, key) == 0, "key_table.h: an entry starts with its key");

/* A shared resource's calendar: its uses, sorted, apart, merged where they
 * touch (a saturated NIC is one interval), under a spin lock (uses are a
 * few instructions long, and the lock is shared between processes). */
#define CALENDARS 64      /* resources per host (NICs) */
#define CALENDAR_USES 256 /* past this the oldest use is forgotten */

typedef struct {
    _Atomic uint32_t lock;
    uint32_t n;
    _Atomic uint64_t key; /* 0: unused */
    struct { uint64_t start, end; } use[CALENDAR_USES];
} calendar;

static entry *board;
static calendar *calendars; /* after the board's entries, in the same file */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void map_board(void)
{
    size_t bytes = (size_t)ENTRIES * sizeof(entry) + CALENDARS * sizeof(calendar);
    const char *path = getenv("NCCLSIM_TIME_BOARD");
    void *p = path && *path ? fc_host_file_map(path, bytes) : NULL;
    if (!p && path && *path)
        fc_log_fatal_config("modelled time: cannot map the time board %s; steps between processes lose their times",
                            path);
    if (!p) p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    board = p == MAP_FAILED ? NULL : p;
    calendars = board ? (calendar *)(board + ENTRIES) : NULL;
}

static entry *find(uint64_t key, bool insert)
{
    pthread_once(&once, map_board);
    return fc_key_table_find(board, sizeof(entry), ENTRY_BITS, PROBES, key, insert);
}

static calendar *calendar_of(uint64_t key)
{
    pthread_once(&once, map_board);
    if (!calendars || !key) return NULL;
    for (int i = 0; i < CALENDARS; i++) {
        calendar *c = &calendars[i];
        uint64_t k = __atomic_load_n(&c->key, __ATOMIC_ACQUIRE), zero = 0;
        if (k == key) return c;
        if (k == 0 && (__atomic_compare_exchange_n(&c->key, &zero, key, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
                       zero == key))
            return c;
    }
    return NULL;
}

static void lock(calendar *c)
{
    while (__atomic_exchange_n(&c->lock, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&c->lock, __ATOMIC_RELAXED)) sched_yield();
}

static void unlock(calendar *c) { __atomic_store_n(&c->lock, 0, __ATOMIC_RELEASE); }

/* Insert [start, end) at position i (apart from its neighbours or touching them). */
static void insert_use(calendar *c, uint32_t i, uint64_t start, uint64_t end)
{
    bool joins_prev = i > 0 && c->use[i - 1].end == start, joins_next = i < c->n && c->use[i].start == end;
    if (joins_prev && joins_next) {
        c->use[i - 1].end = c->use[i].end;
        memmove(&c->use[i], &c->use[i + 1], (c->n - i - 1) * sizeof c->use[0]);
        c->n--;
    } else if (joins_prev) {
        c->use[i - 1].end = end;
    } else if (joins_next) {
        c->use[i].start = start;
    } else {
        if (c->n == CALENDAR_USES) { /* full: the oldest use is forgotten */
            if (i == 0) return;          /* (this one) */
            memmove(&c->use[0], &c->use[1], (c->n - 1) * sizeof c->use[0]);
            c->n--;
            i--;
        }
        memmove(&c->use[i + 1], &c->use[i], (c->n - i) * sizeof c->use[0]);
        c->use[i].start = start;
        c->use[i].end = end;
        c->n++;
    }
}

uint64_t fc_board_reserve(uint64_t key, uint64_t ready, uint64_t busy)
{
    calendar *c = calendar_of(key);
    if (!c || !busy) return ready;
    lock(c);
    uint64_t start = ready;
    uint32_t i = 0;
    for (; i < c->n; i++) { /* the first gap at or after `ready` that holds `busy` */
        if (c->use[i].end <= start) continue;
        if (c->use[i].start >= start + busy) break;
        start = c->use[i].end;
    }
    insert_use(c, i, start, start + busy);
    unlock(c);
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
