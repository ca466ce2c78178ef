/* NCCL's device primitives (src/device/prims_{simple,ll,ll128}.h), played on
 * the CPU: the per-connection step protocol (head/tail credits, connFifo
 * sizes and offsets, LL/LL128 line flags) and the data each step carries.
 *
 * A fc_prims is what one group of a kernel's threads builds with
 * `Primitives<...> prims(...)`: its receive and send connections towards ring
 * or tree neighbours or a P2P peer. Each operation moves one chunk: it waits
 * for the step it needs on every connection (blocking its flow, see tasks.h),
 * reduces the inputs and writes the outputs, then posts the step. The step
 * counts are those of the real kernel, so NCCL's proxy (network connections)
 * and the peer's emulated kernel (shared memory and P2P connections) see the
 * same protocol as on a GPU. */
#ifndef NCCLSIM_DEVICE_PRIMS_H
#define NCCLSIM_DEVICE_PRIMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decode.h"
#include "device_link.h"
#include "reduce.h"
#include "tasks.h"

#define FC_PRIMS_MAX_PEERS 32 /* NCCL_MAX_NVLS_ARITY; trees have 3 (NCCL_MAX_TREE_ARITY) */

typedef struct fc_emu fc_emu;

/* One ncclConnInfo, as the kernel uses it. */
typedef struct {
    int peer;
    char *buff;                  /* buffs[proto] */
    volatile uint64_t *head, *tail;
    int stepSize;                /* bytes between Simple steps (conn->stepSize) */
    volatile char *fifo;         /* ncclConnFifo[NCCL_STEPS], NULL when none */
    volatile uint64_t *step;     /* conn->step: where the kernel keeps its step between launches */
    /* NVLS: a buffer or credits at a multicast address (NULL: plain memory).
     * Reading the credits is NCCL's multimem.ld_reduce.min over the team,
     * storing writes every member's copy; data read from the buffer is the
     * team's reduction (multimem.ld_reduce), data written goes to every copy
     * (multimem.st). */
    const fc_mc_view *mc, *mc_credits;
    /* names on the wake board (fc_sim_memory_where) of head, tail and buff,
     * the last valid for buff_span bytes from buff (0: unknown) */
    uint64_t head_key, tail_key, buff_key;
    size_t buff_span;
} fc_conn;

enum { FC_BUF_NONE = -1, FC_BUF_INPUT = 0, FC_BUF_OUTPUT = 1 };

/* What a primitive waits for, for the stall report (tasks.h): the fields,
 * written as text only when a report asks. */
typedef struct {
    fc_wait_note note; /* first: the flow's note points here */
    const char *who, *what, *seen;
    bool send;
    int peer;
    uint64_t step, value;
    char text[200]; /* a wait said in full (rare: setting up) */
} fc_prims_wait;

typedef struct {
    fc_emu *e;
    fc_task *t;
    const char *who;  /* "rank 3 channel 2 AllReduce RING SIMPLE", for stall reports */
    int channel;      /* its block's channel (-1: none) */
    int proto;
    fc_redop op;
    size_t esz;
    int slicePerChunk, stepPerSlice; /* Simple */
    int stepElems;                   /* Simple: elements per step (sliceSize basis) */
    int nrecv, nsend;
    char *bufs[2]; /* user input, output */
    bool notes; /* fc_prims_cfg's */
    bool notedStores; /* a multicast store left notes naming this GPU's copy */
    bool offered;     /* a gather's: its output is offered for deliveries (deliveries.h) */
    uint32_t gathered, delivered; /* and the peers' steps it took since, and of those delivered */
    fc_prims_wait waiting;
    bool ok;
    /* Last: set up to nrecv and nsend only, not cleared (7.7 KB) by fc_prims_init. */
    fc_conn recv[FC_PRIMS_MAX_PEERS], send[FC_PRIMS_MAX_PEERS];
    uint64_t rstep[FC_PRIMS_MAX_PEERS], sstep[FC_PRIMS_MAX_PEERS];
} fc_prims;

typedef struct {
    int proto;
    int slicePerChunk, stepPerSlice; /* Simple */
    int stepBytes;                   /* Simple: bytes per step; 0: buffSizes[SIMPLE] / NCCL_STEPS */
    int connIndexRecv, connIndexSend; /* which of a peer's NCCL_MAX_CONNS connections each side uses */
    /* NVLS: a large step of a scatter or a multicast store may be a note
     * naming where its data is instead of a copy, and the gathers and
     * multicast reads follow notes (prims.c, "steps by reference"). Only
     * for connections whose every reader is built with it. */
    bool notes;
} fc_prims_cfg;

/* Build: peers lists end at the first negative entry (at most n of them).
 * False (with the emulation's error set) when a connection is unusable. */
bool fc_prims_init(fc_prims *p, fc_emu *e, fc_task *t, const fc_nccl_channel *ch, const char *who,
                   const fc_prims_cfg *cfg, const int *recvPeers, int nrecvMax, const int *sendPeers, int nsendMax,
                   uintptr_t input, uintptr_t output, fc_redop op);
/* One primitive call: receive (and reduce) from every receive peer, take the
 * source (src buffer at srcIx) into the reduction, write the result at dstIx
 * of dst and to every send peer. Indices and nelem are in elements; a
 * negative nelem moves nothing but still takes the steps. */
void fc_prims_op(fc_prims *p, bool recv, bool send, int src, int64_t srcIx, int dst, int64_t dstIx, int64_t nelem,
                 bool postOp);
/* NCCL's ScatterGatherOp: scatter (send) peerElem elements of the input at
 * bufIx + i * peerOffset to send peer i, or gather (receive) them from
 * receive peer i into the output; elements past totalElem are not moved,
 * skip >= 0 leaves out that peer's share of the buffer, shift rotates the
 * order. Every connection takes one slice's steps per slice. */
void fc_prims_scatter(fc_prims *p, int64_t bufIx, int64_t totalElem, int64_t peerElem, int64_t peerOffset, int skip,
                      int shift);
void fc_prims_gather(fc_prims *p, int64_t bufIx, int64_t totalElem, int64_t peerElem, int64_t peerOffset, int skip,
                     int shift, bool postOp);
/* NVLS, steps delivered into the readers' outputs (deliveries.h). A
 * gather's fc_prims (built with notes) that will next make `calls` calls of
 * fc_prims_gather, each putting every peer's data at its element of the
 * output without a post-op, offers the output for the steps those calls
 * take; withdrawn by fc_prims_fini. `calls` must be exact (or fewer): a
 * step past them is the next collective's, whose store must not find this
 * output. And a multicast send whose data the
 * team's gathers put at element outIx of their outputs: fc_prims_op(p, recv,
 * true, src, srcIx, FC_BUF_NONE, 0, nelem, false), with the data written
 * straight into the output of every GPU that offered it. */
void fc_prims_offer_output(fc_prims *p, int64_t calls);
void fc_prims_store(fc_prims *p, bool recv, int src, int64_t srcIx, int64_t outIx, int64_t nelem);
/* NCCL's process<Recv, Send>(fn) (Simple, one step per chunk), for kernels
 * that place each step's data themselves: waits for one step on every
 * receive (when recv) and send (when send) connection, hands fn their slots
 * (a multicast receive slot already reduced over the team, a multicast send
 * slot stored to every copy after fn), then every send connection carries
 * nelem elements (its connFifo size) and every step is posted. fn moves data
 * with fc_prims_reduce_copy. */
typedef void (*fc_prims_step_fn)(fc_prims *p, void *ctx, char *const *srcs, int nsrcs, char *const *dsts,
                                 int ndsts);
void fc_prims_process(fc_prims *p, bool recv, bool send, int64_t nelem, fc_prims_step_fn fn, void *ctx);
/* reduceCopy: n elements, the reduction of srcs (the pre-op on srcs[0] when
 * pre, the post-op on the result when post) into every dst. */
void fc_prims_reduce_copy(fc_prims *p, const void *const *srcs, int nsrcs, void *const *dsts, int ndsts, size_t n,
                          bool pre, bool post);
/* The destructor: the steps reached go back to each connection. */
void fc_prims_fini(fc_prims *p);

/* ---- single connections, for algorithms with step rules of their own (PAT) ----
 * p gives the context (emulation, flow, names for messages, data type): an
 * fc_prims built with no peers. */

/* Connection connIndex to (send) or from peer on channel ch. */
bool fc_prims_conn(fc_prims *p, const fc_nccl_channel *ch, int peer, bool send, int connIndex, fc_conn *out);
/* Block until the receiver's tail reaches want, or the sender's head + NCCL_STEPS
 * does; false when the kernel was aborted meanwhile. */
bool fc_prims_conn_wait(fc_prims *p, const fc_conn *c, bool send, uint64_t want);
/* connFifo[step].size of a send connection (when it has a FIFO), in bytes. */
void fc_prims_conn_set_size(const fc_prims *p, const fc_conn *c, uint64_t step, int64_t bytes);
/* Store a connection's head or tail for the peer (release; every copy when
 * multicast) and wake whoever waits for it. */
void fc_prims_conn_post(const fc_conn *c, volatile uint64_t *counter, uint64_t value);

/* NCCL's names for the calls the algorithms make (directX behaves as X
 * without registered buffers, which the emulation refuses at launch). */
#define FC_SEND(p, in, n) fc_prims_op((p), false, true, FC_BUF_INPUT, (in), FC_BUF_NONE, 0, (n), false)
#define FC_RECV(p, out, n, post) fc_prims_op((p), true, false, FC_BUF_NONE, 0, FC_BUF_OUTPUT, (out), (n), (post))
#define FC_COPY_SEND(p, in, out, n) fc_prims_op((p), false, true, FC_BUF_INPUT, (in), FC_BUF_OUTPUT, (out), (n), false)
#define FC_RECV_COPY_SEND(p, out, n) fc_prims_op((p), true, true, FC_BUF_NONE, 0, FC_BUF_OUTPUT, (out), (n), false)
#define FC_RECV_REDUCE_SEND(p, in, n) fc_prims_op((p), true, true, FC_BUF_INPUT, (in), FC_BUF_NONE, 0, (n), false)
#define FC_RECV_REDUCE_COPY(p, in, out, n, post) \
    fc_prims_op((p), true, false, FC_BUF_INPUT, (in), FC_BUF_OUTPUT, (out), (n), (post))
#define FC_RECV_REDUCE_COPY_SEND(p, in, out, n, post) \
    fc_prims_op((p), true, true, FC_BUF_INPUT, (in), FC_BUF_OUTPUT, (out), (n), (post))

#endif
