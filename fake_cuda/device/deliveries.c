/* The delivery board (deliveries.h): an open-addressed table of offers,
 * mapped shared from a file every process of a host maps. Only the gather
 * that owns a connection writes its entry; stores read it under a sequence
 * count (odd while the entry is being written), so a read that overlaps a
 * write is seen as no offer. */
#include "deliveries.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hash_mix.h"
#include "host_file.h"
#include "key_table.h"
#include "log.h"

#define ENTRY_BITS 14
#define ENTRIES (1u << ENTRY_BITS) /* a host's gathers: GPUs x heads x channels (8 x 8 x 32 = 2048) */
#define PROBES 64

typedef struct {
    _Atomic uint64_t key; /* 0: empty */
    _Atomic uint64_t seq;
    uint64_t first, end;
    fc_delivery_output out;
} entry;
_Static_assert(offsetof(entry, key) == 0, "key_table.h: an entry starts with its key");

static entry *board;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void map_board(void)
{
    size_t bytes = (size_t)ENTRIES * sizeof(entry);
    const char *path = getenv("NCCLSIM_DELIVERY_BOARD");
    void *p = path && *path ? fc_host_file_map(path, bytes) : NULL;
    if (!p && path && *path)
        fc_log_fatal_config("cannot map the delivery board %s; NVLS steps go through their buffers", path);
    if (!p) p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    board = p == MAP_FAILED ? NULL : p;
}

static entry *find(uint64_t key, bool insert)
{
    pthread_once(&once, map_board);
    return fc_key_table_find(board, sizeof(entry), ENTRY_BITS, PROBES, key, insert);
}

/* The owner's write of an entry's fields between two moves of its count. */
static void write_entry(entry *e, uint64_t first, uint64_t end, const fc_delivery_output *out)
{
    __atomic_fetch_add(&e->seq, 1, __ATOMIC_ACQ_REL); /* odd: being written */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    e->first = first;
    e->end = end;
    if (out) e->out = *out;
    __atomic_fetch_add(&e->seq, 1, __ATOMIC_RELEASE);
}

bool fc_delivery_output_at(uintptr_t out, fc_delivery_output *o)
{
    o->bytes = fc_sim_memory_span(out);
    return o->bytes && fc_mem_ref_make(out, o->bytes, &o->ref);
}

bool fc_delivery_offer(uint64_t key, uint64_t first, uint64_t end, const fc_delivery_output *out)
{
    entry *e = first < end ? find(key, true) : NULL;
    if (!e) return false;
    write_entry(e, first, end, out);
    return true;
}

/* The entry goes back to the board: a communicator's buffers are freed with
 * it, and their keys never come again (a board of entries kept forever
 * filled up after some communicators). It holds no steps first, so that a
 * store that found it before reads no offer, as does one that finds it
 * claimed by another key (fc_delivery_open checks the key last). */
void fc_delivery_withdraw(uint64_t key)
{
    entry *e = find(key, false);
    if (!e) return;
    write_entry(e, 0, 0, NULL);
    fc_key_table_give_back(e);
}

void *fc_delivery_open(uint64_t key, uint64_t step, size_t at, size_t bytes, void **hold)
{
    *hold = NULL;
    entry *e = find(key, false);
    if (!e) return NULL;
    uint64_t seq = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
    uint64_t first = e->first, end = e->end;
    fc_delivery_output out = e->out;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (seq % 2 || __atomic_load_n(&e->seq, __ATOMIC_RELAXED) != seq) return NULL; /* being written */
    if (__atomic_load_n(&e->key, __ATOMIC_ACQUIRE) != key) return NULL;           /* given back meanwhile */
    if (step < first || step >= end || at > out.bytes || bytes > out.bytes - at) return NULL;
    fc_mem_ref bytes_ref = out.ref; /* just the step's bytes: a mapping populates what is written */
    bytes_ref.offset += at;
    bytes_ref.addr += at;
    return fc_mem_ref_open_writable(&bytes_ref, bytes, hold);
}

/* ---- the mark in a delivered step's slot ---- */

#define MARK_MAGIC 0x6e63636c73696d44ull /* "ncclsimD" */

typedef struct {
    uint64_t magic, check, step;
    int64_t outIx;
    uint64_t bytes;
} mark;
_Static_assert(sizeof(mark) == FC_DELIVERY_MARK_BYTES, "the mark's size is in the header");

/* A check over the fields, so that no data a step left in a slot reads as a mark. */
static uint64_t mark_check(const mark *m)
{
    const uint64_t words[] = {(uint64_t)m->outIx, m->bytes};
    return fc_hash_words(m->step, words, sizeof words / sizeof *words);
}

void fc_delivery_mark(void *slot, uint64_t step, int64_t outIx, uint64_t bytes)
{
    mark m = {.magic = MARK_MAGIC, .step = step, .outIx = outIx, .bytes = bytes};
    m.check = mark_check(&m);
    memcpy(slot, &m, sizeof m);
}

bool fc_delivery_marked(const void *slot, uint64_t step, int64_t *outIx, uint64_t *bytes)
{
    mark m;
    memcpy(&m, slot, sizeof m);
    if (m.magic != MARK_MAGIC || m.step != step || m.check != mark_check(&m)) return false;
    *outIx = m.outIx;
    *bytes = m.bytes;
    return true;
}
