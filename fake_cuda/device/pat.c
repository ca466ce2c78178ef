/* The PAT algorithm (Parallel Aggregated Trees, a variant of Bruck's) of
 * AllGather and ReduceScatter, Simple protocol: RunWorkColl<..., NCCL_ALGO_PAT,
 * NCCL_PROTO_SIMPLE> of src/device/{all_gather,reduce_scatter}.h with
 * patCopy/patReduce of prims_simple.h.
 *
 * NCCL picks PAT when every host has one rank. Rank r exchanges with the
 * ranks at distance 2^d (dimension d) on connection 0 of every channel:
 * ReduceScatter receives from r - 2^d and sends to r + 2^d, AllGather the
 * reverse. A step generator (collectives.h, PatRSAlgorithm/PatAGAlgorithm),
 * which NCCL's proxy also runs to know how many steps each peer takes, lists
 * the steps; each names a receive and a send dimension, offsets inside the
 * slots, whether it posts, and which part of the user's buffers it touches.
 * On a GPU up to 16 groups of threads run consecutive steps together; no step
 * of such a round posts a dimension that a later step of the round uses, so
 * running the steps one after the other in the generator's order is one of
 * the orders the GPU allows, and the peers see the same protocol.
 *
 * Releases before 2.26 (PAT_PARALLEL_FACTOR 0) run one step at a time. Their
 * AllGather generator gives the same steps; their ReduceScatter generator
 * packs the slots over skipped steps, so its offsets and step counts differ
 * for host counts that are not powers of two, and it writes a slot's FIFO
 * size whenever new data enters the slot rather than when the slot posts. */
#include <stdlib.h>
#include <string.h>

#include "algorithms.h"
#include "collective.h"
#include "step_time.h"

#define PAT_USED 1 /* a step the kernel runs; the others pad a round */
#define MAX_DIMS 32

/* One step (ncclPatStep). Fields a padding step does not set keep their
 * previous values, as in NCCL. */
typedef struct {
    int recvDim, sendDim, recvOffset, sendOffset, stepOffset, postRecv, postSend, nelem, last;
    bool skip;
    int64_t inpIx, outIx;
} pat_step;

/* The generator's state; `ag` picks PatAGAlgorithm over PatRSAlgorithm,
 * `sequential` the ReduceScatter generator of releases before 2.26. */
typedef struct {
    bool ag, sequential;
    int64_t offset, end, count;
    int chunkCount, nelem, rank, nranks, nrPow2, postFreq, lastA, parallelFactor;
    int aggFactor, as, a, aggDelta, scale, phase;
    int sendSkipped, stepOffset;                      /* ReduceScatter */
    int recvSkipped, phase2recv;                      /* ReduceScatter before 2.26 */
    int asDim, v, bitCount[MAX_DIMS], bitZeroStep[MAX_DIMS]; /* AllGather: the order of aggregated steps */
} pat_gen;

static int log2_up(int x)
{
    int l = 0;
    while ((1 << l) < x) l++;
    return l;
}

static int first_bit(int i, int none) { return i ? __builtin_ctz((unsigned)i) : none; }

/* Over log2(max) bits: RS uses the bit-reversal of ~i, AG that of i. */
static int reversed(int i, int max, bool inverted)
{
    int r = 0;
    for (int bit = 1, rbit = max / 2; bit < max; bit <<= 1, rbit >>= 1)
        if (((i & bit) != 0) != inverted) r += rbit;
    return r;
}

/* Whether i has only the top bits of log2(pow2) set (8, 12, 14, 15 of 16):
 * where the aggregated steps move on to a new peer. */
static bool new_peer(int i, int pow2) { return __builtin_popcount((unsigned)((i ^ (pow2 - 1)) + 1)) == 1; }

/* Where in a user buffer (count elements per rank) the data of the rank s
 * away lies, for the chunk at the generator's offset. */
static int64_t data_ix(const pat_gen *g, int s)
{
    return (int64_t)((g->rank + g->nranks + s) % g->nranks) * g->count + g->offset;
}

static int next_as(pat_gen *g)
{
    for (int d = 0; d < g->asDim; d++) {
        int p = 1 << d;
        if (--g->bitCount[d] != 0) continue;
        g->v ^= p;
        g->bitCount[d] = p;
        if (g->v & p) continue;
        g->bitCount[d] += first_bit(g->bitZeroStep[d], g->asDim) - 1;
        if (g->bitCount[d] == 0) {
            g->v ^= p;
            g->bitCount[d] = p;
        }
        g->bitZeroStep[d]++;
    }
    return g->v;
}

static void reset_a(pat_gen *g)
{
    g->a = 0;
    g->lastA = g->aggFactor;
    if (g->phase >= 2) g->lastA /= 2 * g->scale;
    if (!g->ag) {
        g->sendSkipped = g->stepOffset = g->recvSkipped = 0;
        if (g->phase == 4 && !g->sequential) g->lastA = 1;
    }
}

static void reset(pat_gen *g)
{
    int64_t left = g->end - g->offset;
    g->nelem = (int)(g->chunkCount < left ? g->chunkCount : left);
    if (g->ag) {
        g->scale = g->aggFactor / 2;
        g->phase = g->scale ? 2 : 1;
        g->v = 0;
        for (int i = 0; i < g->asDim; i++) {
            g->bitCount[i] = g->asDim - i;
            g->bitZeroStep[i] = 1;
        }
        g->as = next_as(g);
    } else {
        g->phase = 0;
        g->scale = 1;
        g->phase2recv = 0;
        g->as = g->aggDelta - 1;
    }
    reset_a(g);
}

/* stepBytes: the chunk in bytes; the part [offset, end) of count elements of esz bytes. */
static void gen_init(pat_gen *g, bool ag, bool sequential, int stepBytes, int stepDepth, int maxParallel, int64_t offset, int64_t end,
                     int64_t count, int chunkCount, int rank, int nranks, size_t esz)
{
    memset(g, 0, sizeof *g);
    g->ag = ag;
    g->sequential = sequential && !ag;
    g->offset = offset;
    g->end = end;
    g->count = count;
    g->chunkCount = chunkCount;
    g->rank = rank;
    g->nranks = nranks;
    g->aggDelta = g->nrPow2 = 1 << log2_up(nranks);
    g->aggFactor = 1;
    uint64_t partBytes = (uint64_t)(end - offset) * esz;
    while (partBytes && (uint64_t)stepBytes / (partBytes * (uint64_t)g->aggFactor) >= 2 && g->aggFactor < nranks / 2) {
        g->aggFactor *= 2;
        g->aggDelta /= 2;
    }
    g->postFreq = g->aggFactor;
    g->parallelFactor = maxParallel < g->postFreq ? maxParallel : g->postFreq;
    for (int d = stepDepth; d > 1 && g->aggFactor < nranks / 2; d /= 2) {
        g->aggFactor *= 2;
        g->aggDelta /= 2;
    }
    if (ag) g->asDim = log2_up(g->aggDelta);
    reset(g);
}

/* ReduceScatter's next step (PatRSAlgorithm::getNextOp). */
static void rs_next(pat_gen *g, pat_step *ps)
{
    int a = g->a, pf = g->postFreq, nranks = g->nranks;
    bool closing = (a % pf) + 1 >= pf || a == g->lastA - 1; /* the step that posts its slot */
    ps->last = 0;
    ps->nelem = g->nelem;
    ps->outIx = g->offset;
    ps->stepOffset = g->stepOffset;
    bool skip = false;
    if (a >= g->lastA) {
        skip = true;
    } else if (g->phase == 0) { /* own data, sent to the next rank */
        int s = reversed(a, g->lastA, true) * g->aggDelta + g->as;
        skip = s >= nranks;
        ps->inpIx = data_ix(g, s);
        ps->recvDim = -1;
        ps->sendDim = 0;
        ps->outIx = 0;
        ps->recvOffset = -1;
        ps->sendOffset = (a % pf) * g->nelem;
        ps->postSend = closing;
        ps->postRecv = 0;
    } else if (g->phase == 1) {
        int s = reversed(a, g->lastA, true) * g->aggDelta + g->as;
        skip = s >= nranks;
        ps->recvDim = first_bit(s, g->nrPow2);
        ps->sendOffset = ps->recvOffset = (a % pf) * g->nelem;
        ps->postSend = ps->recvDim == 0 && closing;
        ps->postRecv = closing;
        s -= 1 << ps->recvDim;
        ps->inpIx = data_ix(g, s);
        ps->sendDim = s ? first_bit(s, g->nrPow2) : -1;
        if (ps->sendDim == -1) {
            ps->sendOffset = -1;
        } else if (g->as == 1 << ps->recvDim) {
            if (new_peer(a, g->aggFactor)) {
                g->sendSkipped = a;
                ps->stepOffset = g->stepOffset = 0;
            }
            ps->sendOffset = ((a - g->sendSkipped) % pf) * g->nelem;
        }
        int recvDim = ps->recvDim;
        if (s < nranks && skip) {
            ps->recvDim = -1;
            ps->recvOffset = -1;
            ps->postRecv = 0;
            skip = false;
        }
        if (recvDim > 0 && ((a - g->sendSkipped) % pf) + 1 >= pf && !skip) g->stepOffset++;
    } else if (g->phase == 2) {
        int s = (2 * reversed(a, g->lastA, true) + 1) * g->scale * g->aggDelta + 1;
        ps->postRecv = 0;
        skip = s >= nranks;
        ps->recvDim = 0;
        ps->postSend = a == g->lastA - 1;
        s -= 1;
        if (s < nranks && skip) {
            ps->recvDim = -1;
            ps->recvOffset = -1;
            skip = false;
        } else if (!skip) {
            int f = a + g->aggFactor - g->aggFactor / g->scale;
            ps->postRecv |= (f + 1) % pf == 0;
            ps->recvOffset = (f % pf) * g->nelem;
        }
        ps->inpIx = data_ix(g, s);
        ps->sendDim = s ? first_bit(s, g->nrPow2) : -1;
        ps->postSend |= (a + 1) % pf == 0;
        ps->sendOffset = (a % pf) * g->nelem;
    } else if (g->phase == 3) {
        int s = (2 * reversed(a, g->lastA, true) + 1) * g->scale * g->aggDelta;
        ps->postRecv = a == g->lastA - 1;
        skip = s >= nranks;
        ps->recvDim = first_bit(s, g->nrPow2);
        ps->postSend = 0;
        s -= 1 << ps->recvDim;
        ps->postRecv |= (a + 1) % pf == 0;
        ps->recvOffset = (a % pf) * g->nelem;
        ps->inpIx = data_ix(g, s);
        ps->sendDim = s ? first_bit(s, g->nrPow2) : -1;
        if (s < nranks && skip) {
            ps->recvDim = -1;
            ps->recvOffset = -1;
            ps->postRecv = 0;
            skip = false;
        }
        if (new_peer(a, g->aggFactor / (2 * g->scale))) {
            g->sendSkipped = a;
            ps->stepOffset = g->stepOffset = 0;
        }
        int f = a - g->sendSkipped;
        if ((f % pf) + 1 >= pf && !skip) g->stepOffset++;
        ps->sendOffset = ps->sendDim >= 0 ? (f % pf) * g->nelem : -1;
    } else if (g->phase == 4) { /* the fully reduced part, into the output */
        ps->recvDim = 0;
        ps->sendDim = -1;
        ps->inpIx = data_ix(g, 0);
        ps->recvOffset = ((g->aggFactor - 1) % pf) * g->nelem;
        ps->sendOffset = -1;
        ps->postRecv = 1;
        ps->postSend = 0;
        g->offset += g->chunkCount;
    }
    g->a++;
    if (g->a >= g->lastA && g->a >= g->parallelFactor) {
        int p = g->phase;
        if (p == 1) g->as--;
        if (p == 3) g->scale *= 2;
        g->phase = p == 0   ? (g->as == 1 ? (g->aggFactor > 1 ? 2 : 4) : 1)
                 : p == 1 ? (g->as % 2 == 1 ? 0 : 1)
                 : p == 2 ? 3
                 : p == 3 ? (g->scale < g->aggFactor ? 2 : 4)
                          : 5;
        if (p != 4) reset_a(g);
        else if (g->offset >= g->end) ps->last = 2;
        else reset(g);
    } else if (g->phase == 4 && g->offset >= g->end) {
        ps->last = 1;
    }
    ps->skip = skip;
}

/* ReduceScatter's next step before 2.26: skipped steps are passed over here,
 * and the slots are packed over them. */
static void rs_next_sequential(pat_gen *g, pat_step *ps)
{
    int pf = g->postFreq, nranks = g->nranks;
    for (;;) {
        int a = g->a;
        ps->last = 0;
        ps->nelem = g->nelem;
        ps->outIx = g->offset;
        ps->skip = false;
        bool skip = false;
        if (g->phase == 0) {
            int s = reversed(a, g->lastA, true) * g->aggDelta + g->as, x = (a - g->sendSkipped) % pf;
            skip = s >= nranks;
            ps->inpIx = data_ix(g, s);
            ps->recvDim = -1;
            ps->sendDim = 0;
            ps->outIx = 0;
            ps->recvOffset = -1;
            ps->sendOffset = x * g->nelem;
            ps->stepOffset = 0;
            ps->postSend = x + 1 >= pf || a == g->lastA - 1;
            ps->postRecv = 0;
            if (skip) g->sendSkipped++;
            if (++g->a == g->lastA) {
                g->phase = g->as == 1 ? (g->aggFactor > 1 ? 2 : 4) : 1;
                reset_a(g);
            }
        } else if (g->phase == 1) {
            int s = reversed(a, g->lastA, true) * g->aggDelta + g->as;
            int xs = (a - g->sendSkipped) % pf, xr = (a - g->recvSkipped) % pf;
            skip = s >= nranks;
            ps->recvDim = first_bit(s, g->nrPow2);
            ps->sendOffset = xs * g->nelem;
            ps->recvOffset = xr * g->nelem;
            ps->postSend = ps->recvDim == 0 && (xs + 1 >= pf || a == g->lastA - 1);
            ps->stepOffset = ps->recvDim == 0 ? 0 : (a - g->sendSkipped) / pf;
            ps->postRecv = xr + 1 >= pf || a == g->lastA - 1;
            s -= 1 << ps->recvDim;
            ps->inpIx = data_ix(g, s);
            ps->sendDim = s ? first_bit(s, g->nrPow2) : -1;
            if (ps->sendDim == -1) {
                ps->sendOffset = -1;
                ps->stepOffset = 0;
            } else if (g->as == 1 << ps->recvDim) {
                if (new_peer(a, g->aggFactor)) g->sendSkipped = a;
                int f = a - g->sendSkipped;
                ps->stepOffset = ps->recvDim == 0 ? 0 : f / pf;
                ps->sendOffset = (f % pf) * g->nelem;
            }
            if (s < nranks && skip) {
                ps->recvDim = -1;
                ps->recvOffset = -1;
                ps->postRecv = 0;
                skip = false;
            }
            if (skip || ps->recvDim == -1) g->recvSkipped++;
            if (skip) g->sendSkipped++;
            if (++g->a == g->lastA) {
                g->as--;
                g->phase = g->as % 2 == 1 ? 0 : 1;
                reset_a(g);
            }
        } else if (g->phase == 2) {
            int s = (2 * reversed(a, g->lastA, true) + 1) * g->scale * g->aggDelta + 1;
            ps->postRecv = 0;
            skip = s >= nranks;
            ps->recvDim = 0;
            ps->postSend = a == g->lastA - 1;
            s -= 1;
            if (s < nranks && skip) {
                ps->recvDim = -1;
                ps->recvOffset = -1;
                skip = false;
            } else if (!skip) {
                int f = g->phase2recv++;
                ps->postRecv |= (f + 1) % pf == 0;
                ps->recvOffset = (f % pf) * g->nelem;
            }
            ps->inpIx = data_ix(g, s);
            ps->sendDim = s ? first_bit(s, g->nrPow2) : -1;
            int f = a - g->sendSkipped;
            ps->postSend |= (f + 1) % pf == 0;
            ps->stepOffset = 0;
            ps->sendOffset = (f % pf) * g->nelem;
            if (skip || ps->sendDim == -1) g->sendSkipped++;
            if (++g->a == g->lastA) {
                g->phase = 3;
                reset_a(g);
            }
        } else if (g->phase == 3) {
            int s = (2 * reversed(a, g->lastA, true) + 1) * g->scale * g->aggDelta;
            ps->postRecv = a == g->lastA - 1;
            skip = s >= nranks;
            ps->recvDim = first_bit(s, g->nrPow2);
            ps->postSend = 0;
            s -= 1 << ps->recvDim;
            int f = a - g->recvSkipped;
            ps->postRecv |= (f + 1) % pf == 0;
            ps->recvOffset = (f % pf) * g->nelem;
            ps->inpIx = data_ix(g, s);
            ps->sendDim = s ? first_bit(s, g->nrPow2) : -1;
            if (s < nranks && skip) {
                ps->recvDim = -1;
                ps->recvOffset = -1;
                ps->postRecv = 0;
                skip = false;
            }
            if (new_peer(a, g->aggFactor / (2 * g->scale))) g->sendSkipped = a;
            f = a - g->sendSkipped;
            ps->stepOffset = f / pf; /* accumulate into later steps */
            ps->sendOffset = ps->sendDim >= 0 ? (f % pf) * g->nelem : -1;
            if (skip || ps->recvDim == -1) g->recvSkipped++;
            if (skip) g->sendSkipped++;
            if (++g->a == g->lastA) {
                g->scale *= 2;
                g->phase = g->scale < g->aggFactor ? 2 : 4;
                reset_a(g);
            }
        } else { /* phase 4: the fully reduced part, into the output */
            ps->recvDim = 0;
            ps->sendDim = -1;
            ps->inpIx = data_ix(g, 0);
            ps->recvOffset = (g->phase2recv % pf) * g->nelem;
            ps->stepOffset = 0;
            ps->sendOffset = -1;
            ps->postRecv = 1;
            ps->postSend = 0;
            g->offset += g->chunkCount;
            if (g->offset >= g->end) ps->last = 2;
            else reset(g);
            return;
        }
        if (!skip) return;
    }
}

/* AllGather's next step (PatAGAlgorithm::getNextOp). */
static void ag_next(pat_gen *g, pat_step *ps)
{
    int a = g->a, pf = g->postFreq, nranks = g->nranks;
    ps->last = 0;
    ps->nelem = g->nelem;
    ps->inpIx = g->offset;
    bool skip = false;
    if (a >= g->lastA) {
        skip = true;
    } else if (g->phase == 0) { /* data of ranks further away, into the output */
        int s = a * g->aggDelta + g->as;
        skip = s >= nranks;
        ps->outIx = data_ix(g, s);
        ps->sendDim = -1;
        ps->recvDim = 0;
        ps->inpIx = 0;
        ps->sendOffset = -1;
        ps->recvOffset = (a % pf) * g->nelem;
        ps->stepOffset = 0;
        ps->postRecv = a % pf == pf - 1 || (a + 1) * g->aggDelta + g->as >= nranks;
        ps->postSend = 0;
    } else if (g->phase == 1) {
        int s = a * g->aggDelta + g->as;
        skip = s >= nranks;
        ps->sendDim = first_bit(s, g->nrPow2);
        s -= 1 << ps->sendDim;
        ps->outIx = data_ix(g, s);
        ps->recvDim = s ? first_bit(s, g->nrPow2) : -1;
        ps->sendOffset = ps->recvOffset = (a % pf) * g->nelem;
        ps->postSend = a % pf == pf - 1 || (a + 1) * g->aggDelta + g->as >= nranks;
        ps->postRecv = ps->sendDim == 0 && (a % pf == pf - 1 || (a + 1) * g->aggDelta + g->as - 1 >= nranks);
        ps->stepOffset = ps->sendDim == 0 ? 0 : a / pf;
        if (ps->recvDim == -1) {
            ps->recvOffset = -1;
            ps->postRecv = 0;
        } else if (g->as == 1 << ps->sendDim) {
            int f = (a * g->aggDelta) >> (ps->recvDim + 1);
            ps->recvOffset = (f % pf) * g->nelem;
            ps->postRecv = ps->sendDim == 0 && (f % pf == pf - 1 || (((f + 1) * 2 + 1) << ps->recvDim) >= nranks);
            ps->stepOffset = ps->sendDim == 0 ? 0 : f / pf;
        }
        if (s < nranks && ps->sendDim == 0 && skip) { /* receive once even with nothing to send on */
            ps->sendDim = -1;
            ps->sendOffset = -1;
            ps->postSend = 0;
            skip = false;
        }
    } else if (g->phase == 2) {
        int s = (2 * a + 1) * g->scale * g->aggDelta;
        ps->postSend = a % pf == pf - 1 || (2 * (a + 1) + 1) * g->scale * g->aggDelta >= nranks;
        ps->postRecv = 0;
        skip = s >= nranks;
        ps->sendDim = first_bit(s, g->nrPow2);
        s -= 1 << ps->sendDim;
        ps->sendOffset = (a % pf) * g->nelem;
        ps->stepOffset = a / pf;
        ps->outIx = data_ix(g, s);
        ps->recvDim = s ? first_bit(s, g->nrPow2) : -1;
        if (ps->recvDim == -1) {
            ps->recvOffset = -1;
        } else {
            int f = (a * 2 * g->scale * g->aggDelta) >> (ps->recvDim + 1);
            ps->recvOffset = (f % pf) * g->nelem;
            ps->stepOffset = f / pf;
        }
    }
    g->a++;
    if (g->a >= g->lastA && g->a >= g->parallelFactor) {
        int p = g->phase, as = g->as;
        if (p == 2) g->scale /= 2;
        g->phase = p == 2 ? (g->scale ? 2 : 1) : p == 1 ? (as % 2 == 1 ? 0 : 1) : 1;
        if (p == 0 || (p == 1 && as % 2 == 0)) g->as = next_as(g);
        if (p == 0 && g->as == g->aggDelta / 2) {
            g->offset += g->chunkCount;
            if (g->offset >= g->end) ps->last = 2;
            else reset(g);
        } else {
            reset_a(g);
        }
    } else if (g->phase == 0 && g->as == 1 && g->offset + g->chunkCount >= g->end &&
               g->a - 1 >= ((g->lastA - 1) / g->parallelFactor) * g->parallelFactor) {
        ps->last = 1;
    }
    ps->skip = skip;
}

/* ---- running the steps ---- */

typedef struct {
    fc_conn conn;
    uint64_t step;
    uint64_t acc; /* how far (in elements, counting every step) the slots hold this work's data */
} pat_peer;

typedef struct {
    fc_prims p; /* context only: no peers of its own */
    int esz;
    pat_peer recv[MAX_DIMS], send[MAX_DIMS];
    int ndims;
    bool ag, sequential; /* AllGather; a release before 2.26 */
    uint64_t localAcc;
    char *in, *out;
} pat_run;

static char *slot(const pat_run *r, const pat_peer *peer, uint64_t step, int offset)
{
    uint64_t steps = (uint64_t)r->p.e->L->NCCL_STEPS;
    int stepElems = peer->conn.stepSize / r->esz;
    return peer->conn.buff + ((int64_t)(step % steps) * stepElems + offset) * r->esz;
}

static uint64_t extent(const pat_run *r, const pat_peer *peer, uint64_t step, int offset, int nelem)
{
    return (uint64_t)offset + (uint64_t)nelem + step * (uint64_t)(peer->conn.stepSize / r->esz);
}

static bool pat_open(pat_run *r, fc_coll *c, bool ag)
{
    int rank = c->e->l->rank, nranks = c->e->l->nRanks;
    fc_prims_cfg cfg = {.proto = FC_NCCL_PROTO_SIMPLE, .slicePerChunk = 1, .stepPerSlice = 1};
    memset(r, 0, sizeof *r);
    if (!fc_prims_init(&r->p, c->e, c->t, c->ch, c->who, &cfg, NULL, 0, NULL, 0, c->w->coll.sendbuff,
                       c->w->coll.recvbuff, c->op))
        return false;
    r->esz = (int)c->esz;
    r->ag = ag;
    r->sequential = c->e->L->PAT_PARALLEL_FACTOR == 0;
    r->in = (char *)c->w->coll.sendbuff;
    r->out = (char *)c->w->coll.recvbuff;
    for (int d = 0; d < MAX_DIMS && (1L << d) < nranks; d++, r->ndims++) {
        int lower = (int)((rank - (1L << d) + nranks) % nranks), upper = (int)((rank + (1L << d)) % nranks);
        if (!fc_prims_conn(&r->p, c->ch, ag ? upper : lower, false, 0, &r->recv[d].conn) ||
            !fc_prims_conn(&r->p, c->ch, ag ? lower : upper, true, 0, &r->send[d].conn))
            return false;
        r->recv[d].step = *r->recv[d].conn.step;
        r->send[d].step = *r->send[d].conn.step;
        if (r->sequential) /* as loadRecvConn did */
            fc_prims_conn_post(&r->recv[d].conn, r->recv[d].conn.head, r->recv[d].step);
    }
    return true;
}

static bool dim_ok(const pat_run *r, int dim) { return dim < r->ndims; }

/* After the data moved: the posting step's FIFO size and the new steps (kept
 * in conn->step), how far the slots (`grown`) and the output hold data, then
 * the tail and head for the peers. */
static void finish(pat_run *r, const pat_step *ps, pat_peer *R, pat_peer *S, int n, pat_peer *grown, uint64_t extent,
                   uint64_t localExtent)
{
    fc_task_progress(r->p.t);
    if (S && ps->postSend) {
        if (!(r->sequential && !r->ag)) /* ReduceScatter before 2.26 sized the slot as data entered it */
            fc_prims_conn_set_size(&r->p, &S->conn, S->step, (int64_t)(ps->sendOffset + n) * r->esz);
        *S->conn.step = ++S->step; /* read by the next launch only */
    }
    if (R && ps->postRecv) *R->conn.step = ++R->step;
    if (localExtent > r->localAcc) r->localAcc = localExtent;
    if (grown && extent > grown->acc) grown->acc = extent;
    if (S && ps->postSend) fc_prims_conn_post(&S->conn, S->conn.tail, S->step);
    if (R && ps->postRecv) fc_prims_conn_post(&R->conn, R->conn.head, R->step);
}

/* The modelled time of a step (step_time.h): the slots by their steps' starts. */
static void time_step(pat_run *r, pat_peer *R, uint64_t rstep, pat_peer *S, uint64_t sstep, int n)
{
    fc_step_slot rs = {R ? (uintptr_t)slot(r, R, rstep, 0) : 0, NULL, R ? R->conn.peer : -1},
                 ss = {S ? (uintptr_t)slot(r, S, sstep, 0) : 0, NULL, S ? S->conn.peer : -1};
    fc_step_time(&r->p, &rs, R ? 1 : 0, &ss, S ? 1 : 0, (int64_t)n * (int64_t)r->esz);
}

/* patReduce: the received partial sum (if any) plus this rank's data or what
 * the slot already holds, into the send slot or the output. */
static void rs_step(pat_run *r, const pat_step *ps)
{
    int n = ps->nelem < 0 ? 0 : ps->nelem;
    pat_peer *R = ps->recvDim >= 0 ? &r->recv[ps->recvDim] : NULL;
    pat_peer *S = ps->sendDim >= 0 ? &r->send[ps->sendDim] : NULL;
    const void *srcs[2];
    int nsrcs = 0;
    char *dst;
    uint64_t sendExtent = 0, localExtent = 0;
    if (R) {
        if (!fc_prims_conn_wait(&r->p, &R->conn, false, R->step + 1)) return;
        srcs[nsrcs++] = slot(r, R, R->step, ps->recvOffset);
    }
    if (S) {
        uint64_t st = S->step + (uint64_t)ps->stepOffset;
        if (!fc_prims_conn_wait(&r->p, &S->conn, true, st + 1)) return;
        dst = slot(r, S, st, ps->sendOffset);
        sendExtent = extent(r, S, st, ps->sendOffset, n);
        bool fresh = S->acc < sendExtent; /* new data, or accumulate onto what the slot holds */
        srcs[nsrcs++] = fresh ? r->in + ps->inpIx * r->esz : dst;
        if (fresh && r->sequential) fc_prims_conn_set_size(&r->p, &S->conn, st, (int64_t)(ps->sendOffset + n) * r->esz);
    } else {
        dst = r->out + ps->outIx * r->esz;
        bool fresh = r->localAcc < (uint64_t)ps->outIx + (uint64_t)n;
        if (fresh) localExtent = (uint64_t)ps->outIx + (uint64_t)n;
        srcs[nsrcs++] = fresh ? r->in + ps->inpIx * r->esz : dst;
    }
    if (!r->p.e->no_payload) fc_reduce(&r->p.op, dst, srcs, nsrcs, (size_t)n, false, false);
    time_step(r, R, R ? R->step : 0, S, S ? S->step + (uint64_t)ps->stepOffset : 0, n);
    finish(r, ps, R, S, n, S, sendExtent, localExtent);
}

/* patCopy: data from the receive slot or this rank's input, to the send slot
 * and, the first time it is seen, to the output. */
static void ag_step(pat_run *r, const pat_step *ps)
{
    int n = ps->nelem < 0 ? 0 : ps->nelem;
    pat_peer *R = ps->recvDim >= 0 ? &r->recv[ps->recvDim] : NULL;
    pat_peer *S = ps->sendDim >= 0 ? &r->send[ps->sendDim] : NULL;
    char *src, *copy;
    uint64_t recvExtent = 0, localExtent = 0;
    if (R) {
        uint64_t st = R->step + (uint64_t)ps->stepOffset;
        if (!fc_prims_conn_wait(&r->p, &R->conn, false, st + 1)) return;
        src = slot(r, R, st, ps->recvOffset);
        recvExtent = extent(r, R, st, ps->recvOffset, n);
        copy = R->acc < recvExtent ? r->out + ps->outIx * r->esz : NULL; /* NULL: copied out already */
    } else {
        src = r->in + ps->inpIx * r->esz;
        bool fresh = r->localAcc < (uint64_t)ps->inpIx + (uint64_t)n;
        if (fresh) localExtent = (uint64_t)ps->inpIx + (uint64_t)n;
        copy = fresh ? r->out + ps->outIx * r->esz : NULL;
    }
    if (copy == src) copy = NULL; /* in place */
    if (S) {
        if (!fc_prims_conn_wait(&r->p, &S->conn, true, S->step + 1)) return;
        if (!r->p.e->no_payload) memcpy(slot(r, S, S->step, ps->sendOffset), src, (size_t)n * r->esz);
    }
    if (copy && !r->p.e->no_payload) memcpy(copy, src, (size_t)n * r->esz);
    time_step(r, R, R ? R->step + (uint64_t)ps->stepOffset : 0, S, S ? S->step : 0, n);
    finish(r, ps, R, S, n, R, recvExtent, localExtent);
}

static void run(fc_coll *c, bool ag)
{
    const fc_nccl_layout *L = c->e->L;
    int64_t count, partOffset, partCount, chunkCount;
    fc_coll_part(c, &count, &partOffset, &partCount, &chunkCount);
    pat_run *r = malloc(sizeof *r);
    if (!r) {
        fc_emu_fail(c->e, "%s: out of memory", c->who);
        return;
    }
    if (pat_open(r, c, ag)) {
        pat_gen g;
        pat_step ps;
        memset(&ps, 0, sizeof ps);
        int idle = 0; /* padding steps in a row: a round has at most PAT_PARALLEL_FACTOR */
        /* Before 2.26 AllGather's generator gives the same steps as the parallel one, without padding. */
        int parallel = r->sequential ? 16 : L->PAT_PARALLEL_FACTOR;
        gen_init(&g, ag, r->sequential, (int)(chunkCount * (int64_t)c->esz), L->NCCL_STEPS, parallel, partOffset,
                 partOffset + partCount, count, (int)chunkCount, c->e->l->rank, c->e->l->nRanks, c->esz);
        do {
            if (ag) ag_next(&g, &ps);
            else if (g.sequential) rs_next_sequential(&g, &ps);
            else rs_next(&g, &ps);
            if (ps.skip) {
                if (++idle > 4 * parallel + 64) {
                    fc_emu_fail(c->e, "%s: the PAT step generator does not end", c->who);
                    break;
                }
                continue;
            }
            idle = 0;
            if ((ps.recvDim >= 0 && !dim_ok(r, ps.recvDim)) || (ps.sendDim >= 0 && !dim_ok(r, ps.sendDim))) {
                fc_emu_fail(c->e, "%s: a PAT step names dimension %d of %d", c->who,
                            ps.recvDim > ps.sendDim ? ps.recvDim : ps.sendDim, r->ndims);
                break;
            }
            if (ag) ag_step(r, &ps);
            else rs_step(r, &ps);
        } while (ps.last != 2 && !fc_emu_failed(c->e) && !fc_emu_stopped(c->e));
    }
    free(r);
}

void fc_allgather_pat(fc_coll *c) { run(c, true); }
void fc_reducescatter_pat(fc_coll *c) { run(c, false); }
