/* Kept connections (see conn_cache.h): a table per thread, since a GPU's
 * kernels run on its stream's thread and need no lock for it; direct
 * mapped, a newer connection taking an older one's place. */
#include "conn_cache.h"

#include <string.h>
#include <sys/mman.h>

#include "thread_exit.h"

/* A GPU on 16 channels keeps a few hundred connections per algorithm and
 * protocol (NVLS: some 400); the table's untouched pages cost nothing. */
#define CONN_CACHE_ENTRIES 4096u

static __thread fc_conn_kept *table;

static void table_free(void *t)
{
    munmap(t, CONN_CACHE_ENTRIES * sizeof(fc_conn_kept));
    table = NULL;
}
static fc_thread_exit table_exit = FC_THREAD_EXIT_INIT(table_free);

static unsigned which_of(bool send, int connIndex, int proto)
{
    return (send ? 1u : 0u) | (unsigned)connIndex << 1 | (unsigned)proto << 16;
}

static fc_conn_kept *slot(uintptr_t peer_slot, unsigned which, bool make)
{
    if (!table && make) {
        void *t = mmap(NULL, CONN_CACHE_ENTRIES * sizeof(fc_conn_kept), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (t == MAP_FAILED) return NULL;
        if (!fc_thread_exit_arm(&table_exit, t)) {
            table_free(t);
            return NULL;
        }
        table = t;
    }
    if (!table) return NULL;
    uint64_t h = ((uint64_t)peer_slot >> 3 ^ (uint64_t)which << 40) * 0x9e3779b97f4a7c15ull;
    return &table[h >> 52 & (CONN_CACHE_ENTRIES - 1)];
}

fc_conn_fields fc_conn_fields_at(const fc_nccl_layout *L, uintptr_t at, int proto)
{
    const char *ci = (const char *)at;
    fc_conn_fields f = {.at = at};
    memcpy(&f.buff, ci + L->conn_buffs.off + (size_t)proto * sizeof(void *), sizeof f.buff);
    memcpy(&f.head, ci + L->conn_head.off, sizeof f.head);
    memcpy(&f.tail, ci + L->conn_tail.off, sizeof f.tail);
    memcpy(&f.fifo, ci + L->conn_connFifo.off, sizeof f.fifo);
    memcpy(&f.stepSize, ci + L->conn_stepSize.off, sizeof f.stepSize);
    return f;
}

static bool same_fields(const fc_conn_fields *a, const fc_conn_fields *b)
{
    return a->at == b->at && a->buff == b->buff && a->head == b->head && a->tail == b->tail &&
           a->fifo == b->fifo && a->stepSize == b->stepSize;
}

const fc_conn_kept *fc_conn_cache_lookup(const fc_nccl_launch *l, const fc_nccl_channel *ch, int peer, bool send,
                                         int connIndex, int proto)
{
    uintptr_t peer_slot = fc_nccl_peer_slot(ch, peer);
    unsigned which = which_of(send, connIndex, proto);
    fc_conn_kept *k = slot(peer_slot, which, false);
    if (!k || !peer_slot || k->peer_slot != peer_slot || k->which != which ||
        k->generation != fc_sim_memory_generation())
        return NULL;
    if (k->checked_in == l->serial) return k; /* earlier in this launch */
    uintptr_t peerp;
    memcpy(&peerp, (const void *)peer_slot, sizeof peerp);
    uintptr_t at = fc_nccl_conn_of_peer(l, peerp, send, connIndex);
    if (at != k->fields.at) return NULL; /* only the kept one is known to be readable */
    fc_conn_fields now = fc_conn_fields_at(l->rel->layout, at, proto);
    if (!same_fields(&now, &k->fields)) return NULL;
    k->checked_in = l->serial;
    return k;
}

void fc_conn_cache_keep(const fc_nccl_channel *ch, int peer, bool send, int connIndex, int proto,
                        const fc_conn_fields *fields, uint64_t generation, const fc_conn *c)
{
    uintptr_t peer_slot = fc_nccl_peer_slot(ch, peer);
    unsigned which = which_of(send, connIndex, proto);
    fc_conn_kept *k = peer_slot ? slot(peer_slot, which, true) : NULL;
    if (k)
        *k = (fc_conn_kept){.peer_slot = peer_slot, .which = which, .fields = *fields, .generation = generation,
                            .conn = *c};
}
