/* NCCL's device primitives played on the CPU (see prims.h). The rules
 * follow prims_simple.h, prims_ll.h and prims_ll128.h of NCCL 2.30.7; where a
 * release differs, the difference is a parameter of fc_prims_cfg. */
#include "prims.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn_cache.h"
#include "deliveries.h"
#include "emu_state.h"
#include "hash_mix.h"
#include "idle.h"
#include "int_math.h"
#include "step_time.h"
#include "stream_store.h"
#include "trace.h"

#define NCCL_MODE_OFFSET 1
/* LL: every NCCL_LL_CLEAN_MASK+1 steps the sender rewrites a whole step of
 * flags (device.h: 0x7ffffff8, reached after 2^31 steps; kept for fidelity). */
#define LL_CLEAN_MASK 0x7ffffff8ull
#define LL_LINE 16           /* union ncclLLFifoLine: data1, flag1, data2, flag2 */
#define LL128_LINE_WORDS 16  /* NCCL_LL128_LINEELEMS: 15 data words and a flag */
#define LL128_SLICE_WORDS 256 /* WARP_SIZE * NCCL_LL128_SHMEM_ELEMS_PER_THREAD: what one warp moves */
#define LL128_SLICE_DATA_WORDS (LL128_SLICE_WORDS - LL128_SLICE_WORDS / LL128_LINE_WORDS)

static inline uint64_t load_acq(volatile uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

/* A word's name on the host's wake board (wake_board.h; 0: unknown). */
static uint64_t word_key(const volatile void *w)
{
    uint64_t key;
    fc_sim_memory_where((uintptr_t)w, &key);
    return key;
}

/* The key of a connection's head or tail, or of a word of its buffer. */
static uint64_t counter_key(const fc_conn *c, const volatile uint64_t *counter)
{
    return counter == c->head ? c->head_key : counter == c->tail ? c->tail_key : word_key(counter);
}

static uint64_t buffer_word_key(const fc_conn *c, const volatile void *w)
{
    size_t d = (size_t)((uintptr_t)w - (uintptr_t)c->buff);
    return c->buff_key && d < c->buff_span ? c->buff_key + d : word_key(w); /* keys run with addresses */
}

/* A counter's waiters sleep on its low 32 bits (x86-64 is little-endian);
 * `proxy`: NCCL's proxy reads it too (a connection with a FIFO). */
static void post_counter(volatile uint64_t *counter, uint64_t key, uint64_t value, bool proxy)
{
    __atomic_store_n(counter, value, __ATOMIC_RELEASE);
    fc_wake_word(counter, key, proxy);
}

/* ---- multicast (NVLS) ---- */

static inline volatile uint64_t *copy_of(volatile uint64_t *x, const fc_mc_view *v, int i)
{
    return (volatile uint64_t *)((intptr_t)x + v->delta[i]);
}

/* A credit: multimem.ld_reduce.acquire.min over the team when multicast;
 * *at: the copy that holds it (the one to wait on), *key: its name on the
 * wake board (looked up only when `key` is asked for). */
static uint64_t load_credit(const fc_conn *c, volatile uint64_t *ptr, volatile uint64_t **at, uint64_t *key)
{
    const fc_mc_view *v = c->mc_credits;
    *at = ptr;
    if (!v) {
        if (key) *key = counter_key(c, ptr);
        return load_acq(ptr);
    }
    uint64_t m = UINT64_MAX;
    for (int i = 0; i < v->n; i++) {
        uint64_t x = load_acq(copy_of(ptr, v, i));
        if (x < m) {
            m = x;
            *at = copy_of(ptr, v, i);
            if (key) *key = fc_mc_copy_key(v, (uintptr_t)ptr, i);
        }
    }
    return m;
}

void fc_prims_conn_post(const fc_conn *c, volatile uint64_t *counter, uint64_t value)
{
    const fc_mc_view *v = c->mc_credits;
    if (!v) {
        post_counter(counter, counter_key(c, counter), value, c->fifo != NULL);
        return;
    }
    for (int i = 0; i < v->n; i++)
        post_counter(copy_of(counter, v, i), fc_mc_copy_key(v, (uintptr_t)counter, i), value, false);
}

/* Copy i of a multicast buffer address (without multicast: the address
 * itself), and every copy. */
static char *buffer_copy(const fc_conn *c, char *at, int i) { return c->mc ? at + c->mc->delta[i] : at; }

static int buffer_copies(const fc_conn *c, char *at, char **out)
{
    int n = c->mc ? c->mc->n : 1;
    for (int i = 0; i < n; i++) out[i] = buffer_copy(c, at, i);
    return n;
}

/* ---- steps by reference ----
 * A large NVLS step can leave, instead of its data, a note naming where the
 * data is: a scatter step its source (the user's input, which stays
 * unchanged while the collective runs, and whose range the kernel writes
 * only after every head has reduced it), a multicast store the one copy it
 * wrote (notes_to_team). The readers of those slots (the heads' multimem
 * reduce, the gathers) follow notes (team_sources), so each byte moves once
 * instead of being copied into a slot and read from there. The note starts
 * the slot: a magic and a check over its fields, so that no data a step
 * left in a slot reads as one. */

#define STEP_REF_MAGIC 0x6e63636c73696d52ull /* "ncclsimR" */

typedef struct {
    uint64_t magic, check;
    fc_mem_ref ref;
    uint64_t bytes;
} step_ref;

static uint64_t step_ref_check(const step_ref *r)
{
    const uint64_t words[] = {(uint64_t)(uint32_t)r->ref.pid << 32 | (uint32_t)r->ref.fd, r->ref.ino,
                              r->ref.offset, (uint64_t)(uint32_t)r->ref.local_pid, r->ref.addr};
    return fc_hash_words(r->bytes, words, sizeof words / sizeof *words);
}

static void write_note(void *slot, const fc_mem_ref *ref, size_t bytes)
{
    step_ref r = {.magic = STEP_REF_MAGIC, .ref = *ref, .bytes = bytes};
    r.check = step_ref_check(&r);
    memcpy(slot, &r, sizeof r);
}

/* Steps this large may be notes: smaller ones cost less to copy than to
 * name and look up. */
#define NOTE_MIN_BYTES ((size_t)4 << 10)

static bool by_reference(const fc_prims *p, size_t bytes)
{
    return p->notes && !p->e->no_payload && bytes >= NOTE_MIN_BYTES;
}

/* Leave a note naming `bytes` of src in the slot instead of copying them;
 * false when the step is small or no file backs the source. */
static bool scatter_by_reference(const fc_prims *p, void *slot, const void *src, size_t bytes)
{
    fc_mem_ref ref;
    if (!by_reference(p, bytes) || !fc_mem_ref_make((uintptr_t)src, bytes, &ref))
        return false;
    write_note(slot, &ref, bytes);
    return true;
}

/* multimem.st of a large step: the data goes to a copy in memory this
 * process bound (own_copy: with a process per GPU, the storing GPU's own),
 * and every other copy gets a note naming it.
 * The only readers of those copies are the GPUs' gathers (fc_prims_gather,
 * which follow notes); that copy keeps the step until the last of them
 * gives its credit back (the credits are the team's minimum), and the
 * storing kernel ends only after that (fc_prims_fini), so the memory and
 * the process that hold it outlive every read. -1: no copy is this
 * process's (then every copy is written). */
static int own_copy(const fc_conn *c, int32_t self)
{
    for (int i = 0; i < c->mc->n; i++)
        if (c->mc->pid[i] == self) return i;
    return -1;
}

static void notes_to_team(const fc_conn *c, char *slot, size_t bytes, int own, int32_t self)
{
    fc_mem_ref data = fc_mc_copy_ref(c->mc, (uintptr_t)slot, own, self);
    for (int i = 0; i < c->mc->n; i++)
        if (i != own) write_note(buffer_copy(c, slot, i), &data, bytes);
}

/* The team's copies of a multicast slot as `bytes` of sources each: the
 * copy, or the bytes its note names (held[i] until release_sources).
 * False, with the emulation failed, when a named source cannot be read. */
static bool team_sources(fc_prims *p, const fc_conn *c, char *slot, size_t bytes, const void **srcs, void **held,
                         int *n)
{
    *n = buffer_copies(c, slot, (char **)srcs);
    for (int i = 0; i < *n; i++) held[i] = NULL;
    for (int i = 0; i < *n && p->notes; i++) {
        step_ref r;
        memcpy(&r, srcs[i], sizeof r);
        if (r.magic != STEP_REF_MAGIC || r.check != step_ref_check(&r)) continue;
        const void *at = r.bytes >= bytes ? fc_mem_ref_open(&r.ref, bytes, &held[i]) : NULL;
        if (!at) {
            for (int k = 0; k < i; k++) fc_mem_ref_release(held[k]);
            fc_emu_fail(p->e, "%s: cannot read the %zu bytes that the note in copy %d of rank %d's buffer "
                        "names (%llu bytes of process %d's memory)", p->who, bytes, i, c->peer,
                        (unsigned long long)r.bytes, (int)r.ref.pid);
            return false;
        }
        srcs[i] = at;
    }
    return true;
}

static void release_sources(void *const *held, int n)
{
    for (int i = 0; i < n; i++) fc_mem_ref_release(held[i]);
}

/* multimem.ld_reduce of `count` elements of a multicast slot into dst: the
 * team's copies (or what their notes name) reduce as one source. */
static bool multimem_load_reduce(fc_prims *p, const fc_conn *c, char *slot, void *dst, size_t count)
{
    const void *copies[FC_MC_MAX_TEAM];
    void *held[FC_MC_MAX_TEAM];
    int ncopies;
    if (!team_sources(p, c, slot, count * p->esz, copies, held, &ncopies)) return false;
    fc_reduce_multimem(&p->op, dst, copies, ncopies, count);
    release_sources(held, ncopies);
    return true;
}

/* ---- steps delivered into the gathers' outputs (deliveries.h) ---- */

/* A multicast store's destinations: member j's output where its gather
 * offered it (hit[j], held until deliveries_done), else its copy of the slot. */
typedef struct {
    int conn; /* the send connection delivered through; -1: none */
    char *slot;
    bool hit[FC_MC_MAX_TEAM];
    void *held[FC_MC_MAX_TEAM];
} team_delivery;

/* The destinations of `bytes` of send connection i's step landing at element
 * outIx of the outputs, into dsts (one per member): false, with nothing
 * held, when no member offered its output for the step. */
static bool deliveries_open(fc_prims *p, int i, char *slot, int64_t outIx, size_t bytes, void **dsts,
                            team_delivery *d)
{
    const fc_conn *c = &p->send[i];
    int hits = 0;
    for (int j = 0; j < c->mc->n; j++) {
        uint64_t key = fc_mc_copy_key(c->mc, (uintptr_t)c->buff, j);
        dsts[j] = fc_delivery_open(key, p->sstep[i], (size_t)outIx * p->esz, bytes, &d->held[j]);
        d->hit[j] = dsts[j] != NULL;
        hits += d->hit[j];
        if (!dsts[j]) dsts[j] = buffer_copy(c, slot, j);
    }
    if (!hits) return false;
    d->conn = i;
    d->slot = slot;
    return true;
}

/* After the data: each delivered member's slot gets the mark instead. */
static void deliveries_done(fc_prims *p, team_delivery *d, int64_t outIx, size_t bytes)
{
    if (d->conn < 0) return;
    const fc_conn *c = &p->send[d->conn];
    for (int j = 0; j < c->mc->n; j++)
        if (d->hit[j]) {
            fc_delivery_mark(buffer_copy(c, d->slot, j), p->sstep[d->conn], outIx, bytes);
            fc_mem_ref_release(d->held[j]);
        }
}

/* A gather's step from receive connection i, `n` elements for element outIx
 * of the output: 1 when a store delivered it there already, -1 (the
 * emulation failed) when it delivered it elsewhere. */
static int delivered(fc_prims *p, int i, const char *slot, int64_t outIx, int64_t n)
{
    int64_t ix;
    uint64_t bytes;
    if (!p->offered) return 0;
    p->gathered++;
    if (!fc_delivery_marked(slot, p->rstep[i], &ix, &bytes)) return 0;
    if (ix == outIx && bytes == (uint64_t)n * p->esz) {
        p->delivered++;
        return 1;
    }
    fc_emu_fail(p->e, "%s: step %llu from rank %d was delivered to element %lld (%llu bytes), expected %lld "
                "(%lld bytes)", p->who, (unsigned long long)p->rstep[i], p->recv[i].peer, (long long)ix,
                (unsigned long long)bytes, (long long)outIx, (long long)n * (long long)p->esz);
    return -1;
}

/* The receive connections a gather offers its output on: those from one
 * member's copy of a multicast buffer (a multimem receive is a reduce's). */
static bool offers_on(const fc_conn *c) { return !c->mc; }

void fc_prims_offer_output(fc_prims *p, int64_t calls)
{
    fc_delivery_output out; /* one output for every connection: named once */
    if (!p->ok || !p->notes || p->e->no_payload || calls <= 0 ||
        !fc_delivery_output_at((uintptr_t)p->bufs[FC_BUF_OUTPUT], &out))
        return;
    uint64_t steps = (uint64_t)calls * (uint64_t)p->slicePerChunk * (uint64_t)p->stepPerSlice;
    for (int i = 0; i < p->nrecv; i++)
        if (offers_on(&p->recv[i]) &&
            fc_delivery_offer(p->recv[i].buff_key, p->rstep[i], p->rstep[i] + steps, &out))
            p->offered = true;
}

/* ---- connections ---- */

static volatile char *fifo_entry(const fc_prims *p, const fc_conn *c, uint64_t step)
{
    const fc_nccl_layout *L = p->e->L;
    return c->fifo + (step % (uint64_t)L->NCCL_STEPS) * L->connFifo.size;
}

void fc_prims_conn_set_size(const fc_prims *p, const fc_conn *c, uint64_t step, int64_t bytes)
{
    if (!c->fifo) return;
    volatile int64_t *size = (volatile int64_t *)(fifo_entry(p, c, step) + p->e->L->connFifo_size.off);
    __atomic_store_n(size, bytes, __ATOMIC_RELEASE);
}

/* The Simple slot of a step: offset mode (the proxy's shared buffers) or
 * the step's place in the connection's own buffer. */
static char *simple_slot(const fc_prims *p, const fc_conn *c, uint64_t step)
{
    const fc_nccl_layout *L = p->e->L;
    if (c->fifo) {
        const void *f = (const void *)fifo_entry(p, c, step);
        if (fc_nccl_get(f, L->connFifo_mode) == NCCL_MODE_OFFSET) return c->buff + fc_nccl_get(f, L->connFifo_offset);
    }
    size_t stride = (size_t)(c->stepSize / (int)p->esz) * p->esz;
    return c->buff + (step % (uint64_t)L->NCCL_STEPS) * stride;
}

/* ---- modelled time (step_time.h) ---- */

typedef struct {
    volatile uint32_t data1, flag1, data2, flag2;
} ll_line;
static ll_line *ll_slot(const fc_prims *p, const fc_conn *c, uint64_t step);
static volatile uint64_t *ll128_slot(const fc_prims *p, const fc_conn *c, uint64_t step);

/* Where a step's slot is, for the time board (a multicast slot by its
 * multicast address, which the driver names alike in every member). */
static uintptr_t slot_at(const fc_prims *p, const fc_conn *c, uint64_t step)
{
    return p->proto == FC_NCCL_PROTO_LL      ? (uintptr_t)ll_slot(p, c, step)
         : p->proto == FC_NCCL_PROTO_LL128 ? (uintptr_t)ll128_slot(p, c, step)
                                             : (uintptr_t)simple_slot(p, c, step);
}

/* The step about to be posted on the receive (recv) and send (send)
 * connections, `bytes` of payload through each: called after the step's
 * data moved and before its counters or flags announce it. */
static void time_step(fc_prims *p, bool recv, bool send, int64_t bytes)
{
    if (!p->e->timed) return;
    fc_step_slot r[FC_PRIMS_MAX_PEERS], s[FC_PRIMS_MAX_PEERS];
    int nr = recv ? p->nrecv : 0, ns = send ? p->nsend : 0;
    for (int i = 0; i < nr; i++)
        r[i] = (fc_step_slot){slot_at(p, &p->recv[i], p->rstep[i]), p->recv[i].mc, p->recv[i].peer};
    for (int i = 0; i < ns; i++)
        s[i] = (fc_step_slot){slot_at(p, &p->send[i], p->sstep[i]), p->send[i].mc, p->send[i].peer};
    fc_step_time(p, r, nr, s, ns, bytes);
}

/* Check a connection's memory and find what is multicast in it: false
 * with the emulation failed, or stopped while a GPU had yet to bind. */
static bool conn_set_up(fc_prims *p, const fc_conn_fields *f, int peer, bool send, int connIndex, fc_conn *out)
{
    fc_emu *e = p->e;
    const fc_nccl_layout *L = e->L;
    const char *side = send ? "send" : "recv";
    size_t buff_span = fc_sim_memory_span(f->buff); /* 0: not simulated memory */
    const char *bad = !buff_span ? "buffer"
                    : !fc_nccl_in_sim_memory(f->head, 8) ? "head"
                    : !fc_nccl_in_sim_memory(f->tail, 8) ? "tail"
                    : f->fifo && !fc_nccl_in_sim_memory(f->fifo, (size_t)L->NCCL_STEPS * L->connFifo.size) ? "connFifo"
                    : NULL;
    if (bad) {
        fc_emu_fail(e, "%s: the %s of %s connection %d to rank %d is not in simulated memory", p->who, bad, side,
                    connIndex, peer);
        return false;
    }
    /* NVLS: the head's buffers and credits may be multicast; they can be used
     * once every GPU of the team has bound its memory. */
    const fc_mc_view *mc = NULL, *mc_credits = NULL;
    int rb, rc;
    while ((rb = fc_multicast_view(f->buff, 1, &mc)) < 0 || (rc = fc_multicast_view(f->head, 8, &mc_credits)) < 0) {
        if (fc_emu_stopped(e)) return false;
        fc_prims_wait *w = &p->waiting;
        snprintf(w->text, sizeof w->text, "%s: %s connection %d to rank %d: waiting for every GPU to bind "
                 "its memory to the multicast object", p->who, side, connIndex, peer);
        w->note = (fc_wait_note){NULL, w->text};
        fc_task_block(p->t, &w->note);
    }
    *out = (fc_conn){.buff = (char *)f->buff, .head = (volatile uint64_t *)f->head,
                     .tail = (volatile uint64_t *)f->tail, .fifo = (volatile char *)f->fifo,
                     .stepSize = f->stepSize, .mc = rb > 0 ? mc : NULL, .mc_credits = rc > 0 ? mc_credits : NULL};
    out->head_key = word_key(out->head);
    out->tail_key = word_key(out->tail);
    out->buff_key = word_key(out->buff);
    out->buff_span = buff_span;
    return true;
}

bool fc_prims_conn(fc_prims *p, const fc_nccl_channel *ch, int peer, bool send, int connIndex, fc_conn *out)
{
    fc_emu *e = p->e;
    const fc_nccl_layout *L = e->L;
    const fc_conn_kept *k = fc_conn_cache_lookup(e->l, ch, peer, send, connIndex, p->proto);
    uintptr_t at;
    if (k) {
        *out = k->conn; /* set up by an earlier launch, nothing changed since */
        at = k->fields.at;
    } else {
        uint64_t generation = fc_sim_memory_generation();
        at = fc_nccl_conn_addr(e->l, ch, peer, send, connIndex);
        if (!at || !fc_nccl_in_sim_memory(at, L->conn.size)) {
            fc_emu_fail(e, "%s: %s connection %d to rank %d is not in simulated memory", p->who,
                        send ? "send" : "recv", connIndex, peer);
            return false;
        }
        fc_conn_fields f = fc_conn_fields_at(L, at, p->proto);
        if (!conn_set_up(p, &f, peer, send, connIndex, out)) return false;
        fc_conn_cache_keep(ch, peer, send, connIndex, p->proto, &f, generation, out);
    }
    out->peer = peer;
    out->step = (volatile uint64_t *)(at + (uintptr_t)L->conn_step.off);
    return true;
}

bool fc_prims_init(fc_prims *p, fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const char *who,
                   const fc_prims_cfg *cfg, const int *recvPeers, int nrecvMax, const int *sendPeers, int nsendMax,
                   uintptr_t input, uintptr_t output, fc_redop op)
{
    memset(p, 0, offsetof(fc_prims, recv));
    p->e = e;
    p->t = t;
    p->who = who;
    p->channel = ch ? ch->id : -1;
    p->proto = cfg->proto;
    p->op = op;
    p->esz = fc_nccl_type_size(op.type);
    p->slicePerChunk = cfg->slicePerChunk;
    p->stepPerSlice = cfg->stepPerSlice;
    p->bufs[FC_BUF_INPUT] = (char *)input;
    p->bufs[FC_BUF_OUTPUT] = (char *)output;
    p->notes = cfg->notes;
    int stepBytes = cfg->stepBytes ? cfg->stepBytes : e->l->buffSizes[FC_NCCL_PROTO_SIMPLE] / e->L->NCCL_STEPS;
    p->stepElems = p->esz ? stepBytes / (int)p->esz : 0;
    if (!p->esz || !fc_redop_valid(&op)) {
        fc_emu_fail(e, "%s: no reduction for data type %d, operator %d, argument 0x%llx", who, op.type, op.redop,
                    (unsigned long long)op.arg);
        return false;
    }
    /* Simple rounds each connection's step up to a whole chunk; a receiver
     * returns the credit it skipped (loadRecvConn/loadSendConn). */
    uint64_t round = cfg->proto == FC_NCCL_PROTO_SIMPLE ? (uint64_t)(cfg->slicePerChunk * cfg->stepPerSlice) : 1;
    for (int i = 0; i < nrecvMax && recvPeers[i] >= 0; i++) {
        if (!fc_prims_conn(p, ch, recvPeers[i], false, cfg->connIndexRecv, &p->recv[i])) return false;
        uint64_t s = *p->recv[i].step;
        p->rstep[i] = (s + round - 1) / round * round;
        if (cfg->proto == FC_NCCL_PROTO_SIMPLE) fc_prims_conn_post(&p->recv[i], p->recv[i].head, p->rstep[i]);
        p->nrecv++;
    }
    for (int i = 0; i < nsendMax && sendPeers[i] >= 0; i++) {
        if (!fc_prims_conn(p, ch, sendPeers[i], true, cfg->connIndexSend, &p->send[i])) return false;
        uint64_t s = *p->send[i].step;
        p->sstep[i] = (s + round - 1) / round * round;
        p->nsend++;
    }
    p->ok = true;
    return true;
}

void fc_prims_fini(fc_prims *p)
{
    if (!p->ok) return;
    /* Multicast stores whose notes name this GPU's copy: every gather read them first. */
    uint64_t steps = (uint64_t)p->e->L->NCCL_STEPS;
    for (int i = 0; i < p->nsend && p->notedStores; i++)
        if (p->send[i].mc && !fc_prims_conn_wait(p, &p->send[i], true, p->sstep[i] + steps)) break;
    for (int i = 0; i < p->nrecv && p->offered; i++) /* only what the gather may have claimed */
        if (offers_on(&p->recv[i])) fc_delivery_withdraw(p->recv[i].buff_key);
    if (p->offered && fc_trace_enabled())
        fc_trace_event("nvls_delivered", "\"who\":\"%s\",\"steps\":%u,\"delivered\":%u", p->who, p->gathered,
                       p->delivered);
    for (int i = 0; i < p->nrecv; i++) *p->recv[i].step = p->rstep[i];
    for (int i = 0; i < p->nsend; i++) *p->send[i].step = p->sstep[i];
}

/* ---- waiting ---- */

static bool aborted(const fc_prims *p) { return fc_emu_stopped(p->e); }

/* What a blocked flow waits for, for the stall report. */
static void write_wait(const fc_wait_note *note, char *buf, size_t size)
{
    const fc_prims_wait *w = (const fc_prims_wait *)note;
    snprintf(buf, size, "%s: %s %s rank %d (step %llu, %s %llu)", w->who, w->what, w->send ? "to" : "from",
             w->peer, (unsigned long long)w->step, w->seen, (unsigned long long)w->value);
}

/* The note of the wait that follows (the flow's stall report reads it). */
static const fc_wait_note *describe(fc_prims *p, const char *what, bool send, int peer, uint64_t step,
                                    const char *seen, uint64_t value)
{
    p->waiting = (fc_prims_wait){.note = {write_wait, NULL}, .who = p->who, .what = what, .seen = seen,
                                 .send = send, .peer = peer, .step = step, .value = value};
    return &p->waiting.note;
}

/* Block until the counter + ahead >= want, in the kernel's unsigned 64-bit
 * arithmetic (a proxy with shared buffers starts the head at -NCCL_STEPS);
 * false when the kernel is aborted meanwhile. */
static bool wait_counter(fc_prims *p, const fc_conn *c, volatile uint64_t *ptr, uint64_t ahead, uint64_t want,
                         const char *what, bool send)
{
    volatile uint64_t *at;
    uint64_t v = load_credit(c, ptr, &at, NULL), key;
    if (v + ahead >= want) return true;
    const fc_wait_note *note = describe(p, what, send, c->peer, want, send ? "head" : "tail", v);
    while ((v = load_credit(c, ptr, &at, &key)) + ahead < want) {
        if (aborted(p)) return false;
        fc_task_wait_word(p->t, at, key, (uint32_t)v, c->fifo != NULL, note); /* a FIFO: NCCL's proxy posts */
    }
    return true;
}

bool fc_prims_conn_wait(fc_prims *p, const fc_conn *c, bool send, uint64_t want)
{
    /* A sender may run NCCL_STEPS steps ahead of the credit its receiver gave. */
    if (send) return wait_counter(p, c, c->head, (uint64_t)p->e->L->NCCL_STEPS, want, "waiting for credit", true);
    return wait_counter(p, c, c->tail, 0, want, "waiting for data", false);
}

static bool wait_recv(fc_prims *p, int i, uint64_t want) { return fc_prims_conn_wait(p, &p->recv[i], false, want); }
static bool wait_send(fc_prims *p, int i, uint64_t want) { return fc_prims_conn_wait(p, &p->send[i], true, want); }

/* ---- data ---- */

/* Room for the sources or destinations of one step: the user's buffer, one
 * slot per peer, and the team's copies behind one multicast slot. */
#define MAX_BUFS (1 + FC_PRIMS_MAX_PEERS + FC_MC_MAX_TEAM)

/* Several destinations take the result a piece at a time: computed into a
 * buffer that stays in the cache, then stored to each, so the sources are
 * read from memory once. */
#define COMBINE_PIECE_BYTES (32u << 10)
static __thread _Alignas(64) char combine_piece[COMBINE_PIECE_BYTES];

/* The reduction of a primitive: srcs[0] is the user's source when there is
 * one (the pre-op applies to it when it is the input buffer), then every
 * receive slot; the result goes to every destination. A large result is
 * read next by another GPU's flow or by the user (stream_store.h). */
static void combine(fc_prims *p, const void **srcs, int nsrcs, void **dsts, int ndsts, size_t n, bool pre,
                    bool post)
{
    if (!n || !nsrcs || !ndsts || p->e->no_payload) return;
    bool streaming = n * p->esz >= FC_STREAM_MIN_BYTES;
    if (ndsts == 1 && streaming) {
        fc_reduce_streaming(&p->op, dsts[0], srcs, nsrcs, n, pre, post);
    } else if (ndsts == 1) {
        fc_reduce(&p->op, dsts[0], srcs, nsrcs, n, pre, post);
    } else {
        size_t piece = COMBINE_PIECE_BYTES / p->esz;
        const void *at[MAX_BUFS];
        for (size_t first = 0; first < n; first += piece) {
            size_t k = n - first < piece ? n - first : piece, off = first * p->esz;
            for (int s = 0; s < nsrcs; s++) at[s] = (const char *)srcs[s] + off;
            fc_reduce(&p->op, combine_piece, at, nsrcs, k, pre, post);
            for (int i = 0; i < ndsts; i++) fc_copy_for_reader((char *)dsts[i] + off, combine_piece, k * p->esz, streaming);
        }
        if (streaming) fc_stream_fence();
    }
    fc_task_progress(p->t);
}

/* A multicast store whose step is in the team's first copy: the others
 * take it a piece at a time, each piece read from memory once. */
static void copy_to_team(char *const *copies, int ncopies, size_t bytes)
{
    bool streaming = bytes >= FC_STREAM_MIN_BYTES; /* as combine's */
    for (size_t off = 0; off < bytes; off += COMBINE_PIECE_BYTES) {
        size_t k = bytes - off < COMBINE_PIECE_BYTES ? bytes - off : COMBINE_PIECE_BYTES;
        for (int i = 1; i < ncopies; i++) fc_copy_for_reader(copies[i] + off, copies[0] + off, k, streaming);
    }
    if (streaming) fc_stream_fence();
}

/* LL and LL128 stage a step's words: the result, the source, one per
 * receive peer, each `words` long, in the flow's scratch buffer. */
static uint64_t *staging(fc_prims *p, size_t words)
{
    uint64_t *tmp = fc_task_scratch(p->t, (words ? words : 1) * (size_t)(2 + p->nrecv) * 8);
    if (!tmp) fc_emu_fail(p->e, "%s: out of memory", p->who);
    return tmp;
}

/* nelem elements of the user's buffer, zero-padded to `bytes`. */
static void take_source(const fc_prims *p, void *dst, size_t bytes, int src, int64_t srcIx, int64_t nelem)
{
    size_t n = (size_t)nelem * p->esz;
    memcpy(dst, p->bufs[src] + srcIx * (int64_t)p->esz, n);
    memset((char *)dst + n, 0, bytes - n);
}

/* ---- Simple (prims_simple.h genericOp) ---- */

/* storeIx >= 0: the multicast sends' data lands at that element of the
 * team's outputs (fc_prims_store). */
static void simple_op(fc_prims *p, bool recv, bool send, int src, int64_t srcIx, int dst, int64_t dstIx,
                      int64_t nelem, bool post, int64_t storeIx)
{
    int spc = p->slicePerChunk, sps = p->stepPerSlice;
    if (nelem < 0) nelem = 0;
    int64_t sliceSize = div_up(nelem, 16 * spc) * 16;
    int64_t minSlice = (int64_t)p->stepElems * sps / 32;
    if (sliceSize < minSlice) sliceSize = minSlice;
    int64_t offset = 0;
    for (int slice = 0; slice < spc; slice++) {
        int64_t n = sliceSize < nelem - offset ? sliceSize : nelem - offset;
        const void *srcs[MAX_BUFS];
        void *dsts[MAX_BUFS];
        int nsrcs = 0, ndsts = 0;
        if (src != FC_BUF_NONE) srcs[nsrcs++] = p->bufs[src] + (srcIx + offset) * (int64_t)p->esz;
        if (dst != FC_BUF_NONE) dsts[ndsts++] = p->bufs[dst] + (dstIx + offset) * (int64_t)p->esz;
        if (recv)
            for (int i = 0; i < p->nrecv; i++) {
                if (!wait_recv(p, i, p->rstep[i] + (uint64_t)sps)) return;
                if (p->e->L->SIMPLE_RECV_SETS_FIFO_SIZE) fc_prims_conn_set_size(p, &p->recv[i], p->rstep[i], n * (int64_t)p->esz);
                char *slot = simple_slot(p, &p->recv[i], p->rstep[i]);
                if (!p->recv[i].mc || p->e->no_payload) {
                    srcs[nsrcs++] = slot;
                    continue;
                }
                size_t count = (size_t)(n > 0 ? n : 0);
                void *team = fc_task_scratch(p->t, (count ? count : 1) * p->esz);
                if (!team) {
                    fc_emu_fail(p->e, "%s: out of memory", p->who);
                    return;
                }
                if (!multimem_load_reduce(p, &p->recv[i], slot, team, count)) return;
                srcs[nsrcs++] = team;
            }
        /* multicast sends of a large step: into the outputs the team's
         * gathers offered (deliveries.h), else the own copy and notes to the
         * others (notes_to_team) */
        size_t bytes = (size_t)(n > 0 ? n : 0) * p->esz;
        bool noted = send && by_reference(p, bytes);
        int32_t self = noted ? fc_mem_ref_self() : 0;
        int own[FC_PRIMS_MAX_PEERS];
        team_delivery d = {.conn = -1};
        if (send)
            for (int i = 0; i < p->nsend; i++) {
                if (!wait_send(p, i, p->sstep[i] + (uint64_t)sps)) return;
                fc_prims_conn_set_size(p, &p->send[i], p->sstep[i], n * (int64_t)p->esz);
                char *slot = simple_slot(p, &p->send[i], p->sstep[i]);
                own[i] = -1;
                if (noted && p->send[i].mc && storeIx >= 0 && d.conn < 0 &&
                    deliveries_open(p, i, slot, storeIx + offset, bytes, &dsts[ndsts], &d)) {
                    ndsts += p->send[i].mc->n;
                    continue;
                }
                own[i] = noted && p->send[i].mc ? own_copy(&p->send[i], self) : -1;
                if (own[i] >= 0) dsts[ndsts++] = buffer_copy(&p->send[i], slot, own[i]);
                else ndsts += buffer_copies(&p->send[i], slot, (char **)&dsts[ndsts]);
            }
        combine(p, srcs, nsrcs, dsts, ndsts, (size_t)n, src == FC_BUF_INPUT, post);
        deliveries_done(p, &d, storeIx + offset, bytes);
        for (int i = 0; noted && i < p->nsend; i++)
            if (own[i] >= 0) {
                notes_to_team(&p->send[i], simple_slot(p, &p->send[i], p->sstep[i]), (size_t)n * p->esz, own[i], self);
                p->notedStores = true;
            }
        time_step(p, recv, send, n * (int64_t)p->esz);
        if (recv)
            for (int i = 0; i < p->nrecv; i++) fc_prims_conn_post(&p->recv[i], p->recv[i].head, p->rstep[i] += (uint64_t)sps);
        if (send)
            for (int i = 0; i < p->nsend; i++) fc_prims_conn_post(&p->send[i], p->send[i].tail, p->sstep[i] += (uint64_t)sps);
        fc_task_progress(p->t);
        offset += n;
    }
}

/* ---- Simple scatter and gather (prims_simple.h ScatterGatherOp) ---- */

static void scatter_gather(fc_prims *p, bool send, int64_t bufIx, int64_t totalElem, int64_t peerElem,
                           int64_t peerOffset, int skip, int shift, bool postOp)
{
    if (!p->ok || aborted(p)) return;
    int spc = p->slicePerChunk, sps = p->stepPerSlice;
    int npeers = send ? p->nsend : p->nrecv;
    int64_t sliceSize = (int64_t)p->stepElems * sps;
    int64_t dataSize = div_up(peerElem, 16 * spc) * 16; /* per peer and slice */
    if (dataSize < sliceSize / 32) dataSize = sliceSize / 32;
    int64_t offset = 0;
    for (int slice = 0; slice < spc; slice++) {
        int64_t realSize = peerElem - offset < dataSize ? peerElem - offset : dataSize;
        if (realSize < 0) realSize = 0;
        for (int i = 0; i < npeers; i++) {
            if (send ? !wait_send(p, i, p->sstep[i] + (uint64_t)sps) : !wait_recv(p, i, p->rstep[i] + (uint64_t)sps))
                return;
            if (send) fc_prims_conn_set_size(p, &p->send[i], p->sstep[i], realSize * (int64_t)p->esz);
        }
        for (int j = 0; j < npeers; j++) {
            int i = (j + shift) % npeers;
            int64_t pOffset = i * peerOffset;
            if (skip >= 0 && i >= skip) pOffset += peerOffset;
            int64_t n = realSize < totalElem - pOffset ? realSize : totalElem - pOffset;
            if (n <= 0) continue;
            const void *srcs[MAX_BUFS];
            void *dsts[MAX_BUFS];
            int ndsts;
            if (send) {
                srcs[0] = p->bufs[FC_BUF_INPUT] + (bufIx + pOffset + offset) * (int64_t)p->esz;
                ndsts = buffer_copies(&p->send[i], simple_slot(p, &p->send[i], p->sstep[i]), (char **)dsts);
                if (ndsts > 1 || !scatter_by_reference(p, dsts[0], srcs[0], (size_t)n * p->esz))
                    combine(p, srcs, 1, dsts, ndsts, (size_t)n, true, false);
            } else {
                char *slot = simple_slot(p, &p->recv[i], p->rstep[i]);
                int got = delivered(p, i, slot, bufIx + pOffset + offset, n);
                if (got < 0) return;
                if (got) continue; /* already in the output */
                void *held[FC_MC_MAX_TEAM];
                int nsrcs;
                if (!team_sources(p, &p->recv[i], slot, (size_t)n * p->esz, srcs, held, &nsrcs)) return;
                dsts[0] = p->bufs[FC_BUF_OUTPUT] + (bufIx + pOffset + offset) * (int64_t)p->esz;
                combine(p, srcs, nsrcs, dsts, 1, (size_t)n, false, postOp);
                release_sources(held, nsrcs);
            }
        }
        time_step(p, !send, send, realSize * (int64_t)p->esz);
        for (int i = 0; i < npeers; i++) {
            if (send) fc_prims_conn_post(&p->send[i], p->send[i].tail, p->sstep[i] += (uint64_t)sps);
            else fc_prims_conn_post(&p->recv[i], p->recv[i].head, p->rstep[i] += (uint64_t)sps);
        }
        fc_task_progress(p->t);
        offset += realSize;
    }
}

void fc_prims_scatter(fc_prims *p, int64_t bufIx, int64_t totalElem, int64_t peerElem, int64_t peerOffset, int skip,
                      int shift)
{
    scatter_gather(p, true, bufIx, totalElem, peerElem, peerOffset, skip, shift, false);
}

void fc_prims_gather(fc_prims *p, int64_t bufIx, int64_t totalElem, int64_t peerElem, int64_t peerOffset, int skip,
                     int shift, bool postOp)
{
    scatter_gather(p, false, bufIx, totalElem, peerElem, peerOffset, skip, shift, postOp);
}

/* ---- Simple process (prims_simple.h process) ---- */

void fc_prims_reduce_copy(fc_prims *p, const void *const *srcs, int nsrcs, void *const *dsts, int ndsts, size_t n,
                          bool pre, bool post)
{
    combine(p, (const void **)srcs, nsrcs, (void **)dsts, ndsts, n, pre, post);
}

void fc_prims_process(fc_prims *p, bool recv, bool send, int64_t nelem, fc_prims_step_fn fn, void *ctx)
{
    if (!p->ok || aborted(p)) return;
    uint64_t sps = (uint64_t)p->stepPerSlice;
    int nrecv = recv ? p->nrecv : 0, nsend = send ? p->nsend : 0;
    size_t bytes = (size_t)(nelem > 0 ? nelem : 0) * p->esz;
    char *srcs[FC_PRIMS_MAX_PEERS] = {0}, *dsts[FC_PRIMS_MAX_PEERS] = {0};
    char *staged = NULL; /* nrecv slots of `bytes`, for multicast receives */
    for (int i = 0; i < nrecv; i++)
        if (!wait_recv(p, i, p->rstep[i] + sps)) return;
    for (int i = 0; i < nsend; i++)
        if (!wait_send(p, i, p->sstep[i] + sps)) return;
    for (int i = 0; i < nrecv; i++) {
        fc_conn *c = &p->recv[i];
        char *slot = simple_slot(p, c, p->rstep[i]);
        if (c->mc && !staged && !(staged = fc_task_scratch(p->t, (size_t)nrecv * bytes + 1))) {
            fc_emu_fail(p->e, "%s: out of memory", p->who);
            return;
        }
        srcs[i] = c->mc ? staged + (size_t)i * bytes : slot;
        if (c->mc && !p->e->no_payload && !multimem_load_reduce(p, c, slot, srcs[i], bytes / p->esz)) return;
    }
    /* multimem.st: the step goes to the first GPU's copy, then to the others'
     * (readers see none of it before the tail moves, below) */
    for (int i = 0; i < nsend; i++)
        dsts[i] = buffer_copy(&p->send[i], simple_slot(p, &p->send[i], p->sstep[i]), 0);
    fn(p, ctx, srcs, nrecv, dsts, nsend);
    for (int i = 0; i < nsend; i++) {
        fc_conn *c = &p->send[i];
        if (c->mc && !p->e->no_payload) {
            char *copies[FC_MC_MAX_TEAM];
            int ncopies = buffer_copies(c, simple_slot(p, c, p->sstep[i]), copies);
            copy_to_team(copies, ncopies, bytes);
        }
        fc_prims_conn_set_size(p, c, p->sstep[i], (int64_t)bytes);
    }
    time_step(p, nrecv > 0, nsend > 0, (int64_t)bytes);
    for (int i = 0; i < nrecv; i++) fc_prims_conn_post(&p->recv[i], p->recv[i].head, p->rstep[i] += sps);
    for (int i = 0; i < nsend; i++) fc_prims_conn_post(&p->send[i], p->send[i].tail, p->sstep[i] += sps);
    fc_task_progress(p->t);
}

/* ---- LL (prims_ll.h LLGenericOp): 8 data bytes per 16-byte line ---- */

static ll_line *ll_slot(const fc_prims *p, const fc_conn *c, uint64_t step)
{
    size_t stepLines = (size_t)p->e->l->buffSizes[FC_NCCL_PROTO_LL] / (size_t)p->e->L->NCCL_STEPS / LL_LINE;
    return (ll_line *)c->buff + (step % (uint64_t)p->e->L->NCCL_STEPS) * stepLines;
}

static bool ll_ready(const ll_line *l, uint32_t flag)
{
    return __atomic_load_n(&l->flag1, __ATOMIC_ACQUIRE) == flag && __atomic_load_n(&l->flag2, __ATOMIC_ACQUIRE) == flag;
}

static void ll_store(ll_line *l, uint64_t v, uint32_t flag)
{
    l->data1 = (uint32_t)v;
    l->data2 = (uint32_t)(v >> 32);
    __atomic_store_n(&l->flag1, flag, __ATOMIC_RELEASE);
    __atomic_store_n(&l->flag2, flag, __ATOMIC_RELEASE);
}

/* Writers fill a step's lines in order and wake the last one's flag2 (a
 * step's sender, the net plugin receiving it): a waiter sleeps on that flag
 * until it is set, then on the line still missing. */
static bool ll_wait_lines(fc_prims *p, int i, const ll_line *lines, size_t nlines, uint32_t flag)
{
    for (size_t j = 0; j < nlines; j++) {
        if (ll_ready(&lines[j], flag)) continue;
        const fc_wait_note *note =
            describe(p, "waiting for LL lines", false, p->recv[i].peer, p->rstep[i], "first missing line", j);
        while (!ll_ready(&lines[j], flag)) {
            if (aborted(p)) return false;
            const volatile uint32_t *w = &lines[ll_ready(&lines[nlines - 1], flag) ? j : nlines - 1].flag2;
            uint32_t seen = __atomic_load_n(w, __ATOMIC_ACQUIRE);
            if (seen != flag) fc_task_wait_word(p->t, w, buffer_word_key(&p->recv[i], w), seen, false, note);
            else fc_task_block(p->t, note); /* its flag1 is late */
        }
    }
    return true;
}

static void ll_op(fc_prims *p, bool recv, bool send, int src, int64_t srcIx, int dst, int64_t dstIx,
                  int64_t nelem, bool post)
{
    const uint64_t steps = (uint64_t)p->e->L->NCCL_STEPS;
    size_t stepLines = (size_t)p->e->l->buffSizes[FC_NCCL_PROTO_LL] / steps / LL_LINE;
    if (nelem < 0) nelem = 0;
    size_t eltPerLine = 8 / p->esz, nlines = (size_t)div_up(nelem, (int64_t)eltPerLine);
    if (nlines > stepLines) {
        fc_emu_fail(p->e, "%s: an LL step of %zu lines exceeds the buffer's %zu", p->who, nlines, stepLines);
        return;
    }
    if (send)
        for (int i = 0; i < p->nsend; i++) {
            if (!wait_send(p, i, p->sstep[i] + 1)) return;
            bool clean = (p->sstep[i] & LL_CLEAN_MASK) == LL_CLEAN_MASK;
            fc_prims_conn_set_size(p, &p->send[i], p->sstep[i], (int64_t)((clean ? stepLines : nlines) * LL_LINE));
        }
    /* Lines carry whole 8-byte words: stage everything in word-padded buffers. */
    size_t bytes = nlines * 8;
    uint64_t *tmp = staging(p, nlines);
    if (!tmp) return;
    uint64_t *result = tmp, *mine = tmp + nlines;
    const void *srcs[2 + FC_PRIMS_MAX_PEERS];
    int nsrcs = 0;
    bool data = !p->e->no_payload; /* else the lines carry zeros and their flags */
    if (src != FC_BUF_NONE && data) {
        take_source(p, mine, bytes, src, srcIx, nelem);
        srcs[nsrcs++] = mine;
    }
    if (!data) memset(result, 0, bytes);
    if (recv)
        for (int i = 0; i < p->nrecv; i++) {
            ll_line *lines = ll_slot(p, &p->recv[i], p->rstep[i]);
            uint32_t flag = (uint32_t)(p->rstep[i] + 1);
            if (!ll_wait_lines(p, i, lines, nlines, flag)) return;
            if (!data) continue;
            uint64_t *w = tmp + nlines * (size_t)(2 + i);
            for (size_t j = 0; j < nlines; j++) w[j] = lines[j].data1 | (uint64_t)lines[j].data2 << 32;
            srcs[nsrcs++] = w;
        }
    /* Padding elements ride along (zero from the source, as received otherwise). */
    if (nsrcs) fc_reduce(&p->op, result, srcs, nsrcs, bytes / p->esz, src == FC_BUF_INPUT, post);
    /* a step of no lines waited for nothing from its peers (nor does the GPU's) */
    time_step(p, recv && nlines, send, nelem * (int64_t)p->esz);
    if (send)
        for (int i = 0; i < p->nsend; i++) {
            ll_line *lines = ll_slot(p, &p->send[i], p->sstep[i]);
            uint32_t flag = (uint32_t)(p->sstep[i] + 1);
            for (size_t j = 0; j < nlines; j++) ll_store(&lines[j], result[j], flag);
            if ((p->sstep[i] & LL_CLEAN_MASK) == LL_CLEAN_MASK)
                for (size_t j = nlines; j < stepLines; j++) ll_store(&lines[j], 0, flag);
            volatile uint32_t *last = nlines ? &lines[nlines - 1].flag2 : &lines[0].flag2;
            fc_wake_word(last, buffer_word_key(&p->send[i], last), p->send[i].fifo != NULL);
        }
    if (dst != FC_BUF_NONE && data) memcpy(p->bufs[dst] + dstIx * (int64_t)p->esz, result, (size_t)nelem * p->esz);
    if (recv)
        for (int i = 0; i < p->nrecv; i++) fc_prims_conn_post(&p->recv[i], p->recv[i].head, ++p->rstep[i]);
    if (send)
        for (int i = 0; i < p->nsend; i++) p->sstep[i]++;
    fc_task_progress(p->t);
}

/* ---- LL128 (prims_ll128.h GenericOp): 128-byte lines, the last word a flag ---- */

static volatile uint64_t *ll128_slot(const fc_prims *p, const fc_conn *c, uint64_t step)
{
    size_t stepWords = (size_t)p->e->l->buffSizes[FC_NCCL_PROTO_LL128] / (size_t)p->e->L->NCCL_STEPS / 8;
    return (volatile uint64_t *)c->buff + (step % (uint64_t)p->e->L->NCCL_STEPS) * stepWords;
}

/* The flag word of an LL128 line (its waiters sleep on the low half). */
static volatile uint64_t *ll128_flag(volatile uint64_t *words, size_t line)
{
    return &words[line * LL128_LINE_WORDS + LL128_LINE_WORDS - 1];
}

/* As ll_wait_lines: writers wake the last line's flag. */
static bool ll128_wait_lines(fc_prims *p, int i, volatile uint64_t *words, size_t nlines, uint64_t flag)
{
    for (size_t j = 0; j < nlines; j++) {
        volatile uint64_t *f = ll128_flag(words, j);
        if (load_acq(f) == flag) continue;
        const fc_wait_note *note =
            describe(p, "waiting for LL128 lines", false, p->recv[i].peer, p->rstep[i], "first missing line", j);
        uint64_t v;
        while ((v = load_acq(f)) != flag) {
            if (aborted(p)) return false;
            volatile uint64_t *last = ll128_flag(words, nlines - 1);
            uint64_t lv = load_acq(last);
            if (lv != flag) fc_task_wait_word(p->t, last, buffer_word_key(&p->recv[i], last), (uint32_t)lv, false, note);
            else fc_task_wait_word(p->t, f, buffer_word_key(&p->recv[i], f), (uint32_t)v, false, note);
        }
    }
    return true;
}

static void ll128_op(fc_prims *p, bool recv, bool send, int src, int64_t srcIx, int dst, int64_t dstIx,
                     int64_t nelem, bool post)
{
    const uint64_t steps = (uint64_t)p->e->L->NCCL_STEPS;
    size_t stepWords = (size_t)p->e->l->buffSizes[FC_NCCL_PROTO_LL128] / steps / 8;
    if (nelem < 0) nelem = 0;
    int64_t eltPerSlice = LL128_SLICE_DATA_WORDS * 8 / (int64_t)p->esz;
    size_t nslices = (size_t)div_up(nelem, eltPerSlice);
    size_t nlines = nslices * (LL128_SLICE_WORDS / LL128_LINE_WORDS), dataWords = nslices * LL128_SLICE_DATA_WORDS;
    if (nslices * LL128_SLICE_WORDS > stepWords) {
        fc_emu_fail(p->e, "%s: an LL128 step of %zu words exceeds the buffer's %zu", p->who,
                    nslices * LL128_SLICE_WORDS, stepWords);
        return;
    }
    if (send)
        for (int i = 0; i < p->nsend; i++) {
            if (!wait_send(p, i, p->sstep[i] + 1)) return;
            fc_prims_conn_set_size(p, &p->send[i], p->sstep[i], (int64_t)(nslices * LL128_SLICE_WORDS * 8));
        }
    uint64_t *tmp = staging(p, dataWords);
    if (!tmp) return;
    uint64_t *result = tmp, *mine = tmp + dataWords;
    const void *srcs[2 + FC_PRIMS_MAX_PEERS];
    int nsrcs = 0;
    bool data = !p->e->no_payload; /* else only the lines' flags are written */
    if (src != FC_BUF_NONE && data) {
        take_source(p, mine, dataWords * 8, src, srcIx, nelem);
        srcs[nsrcs++] = mine;
    }
    if (recv)
        for (int i = 0; i < p->nrecv; i++) {
            volatile uint64_t *words = ll128_slot(p, &p->recv[i], p->rstep[i]);
            if (!ll128_wait_lines(p, i, words, nlines, p->rstep[i] + 1)) return;
            if (!data) continue;
            uint64_t *w = tmp + dataWords * (size_t)(2 + i);
            for (size_t j = 0; j < nlines; j++)
                memcpy(w + j * (LL128_LINE_WORDS - 1), (const void *)(words + j * LL128_LINE_WORDS),
                       (LL128_LINE_WORDS - 1) * 8);
            srcs[nsrcs++] = w;
        }
    if (nsrcs) fc_reduce(&p->op, result, srcs, nsrcs, dataWords * 8 / p->esz, src == FC_BUF_INPUT, post);
    time_step(p, recv && nlines, send, nelem * (int64_t)p->esz);
    if (send)
        for (int i = 0; i < p->nsend; i++) {
            volatile uint64_t *words = ll128_slot(p, &p->send[i], p->sstep[i]);
            uint64_t flag = p->sstep[i] + 1;
            for (size_t j = 0; j < nlines; j++) {
                if (data)
                    memcpy((void *)(words + j * LL128_LINE_WORDS), result + j * (LL128_LINE_WORDS - 1),
                           (LL128_LINE_WORDS - 1) * 8);
                __atomic_store_n(ll128_flag(words, j), flag, __ATOMIC_RELEASE);
            }
            volatile uint64_t *last = ll128_flag(words, nlines ? nlines - 1 : 0);
            fc_wake_word(last, buffer_word_key(&p->send[i], last), p->send[i].fifo != NULL);
        }
    if (dst != FC_BUF_NONE && data) memcpy(p->bufs[dst] + dstIx * (int64_t)p->esz, result, (size_t)nelem * p->esz);
    if (send) /* the tail moves only for connections with a FIFO: NCCL's proxy reads it */
        for (int i = 0; i < p->nsend; i++) {
            p->sstep[i]++;
            if (p->send[i].fifo) fc_prims_conn_post(&p->send[i], p->send[i].tail, p->sstep[i]);
        }
    if (recv)
        for (int i = 0; i < p->nrecv; i++) fc_prims_conn_post(&p->recv[i], p->recv[i].head, ++p->rstep[i]);
    fc_task_progress(p->t);
}

/* One step of any protocol; storeIx >= 0: a multicast store's (simple_op).
 * Only Simple steps are delivered (NVLS is Simple): the others ignore it. */
static void prims_op(fc_prims *p, bool recv, bool send, int src, int64_t srcIx, int dst, int64_t dstIx,
                     int64_t nelem, bool postOp, int64_t storeIx)
{
    if (!p->ok || aborted(p)) return;
    recv = recv && p->nrecv;
    send = send && p->nsend;
    if (p->proto == FC_NCCL_PROTO_SIMPLE) simple_op(p, recv, send, src, srcIx, dst, dstIx, nelem, postOp, storeIx);
    else if (p->proto == FC_NCCL_PROTO_LL) ll_op(p, recv, send, src, srcIx, dst, dstIx, nelem, postOp);
    else ll128_op(p, recv, send, src, srcIx, dst, dstIx, nelem, postOp);
}

void fc_prims_op(fc_prims *p, bool recv, bool send, int src, int64_t srcIx, int dst, int64_t dstIx, int64_t nelem,
                 bool postOp)
{
    prims_op(p, recv, send, src, srcIx, dst, dstIx, nelem, postOp, -1);
}

void fc_prims_store(fc_prims *p, bool recv, int src, int64_t srcIx, int64_t outIx, int64_t nelem)
{
    prims_op(p, recv, true, src, srcIx, FC_BUF_NONE, 0, nelem, false, outIx);
}
