/* AllGather and ReduceScatter across hosts by rails (CollNet Direct, and
 * NVLS with CollNet): the element arithmetic their kernels share.
 *
 * Every GPU of a host is a head of its own rail (NCCL offers these paths
 * only with as many heads as GPUs per host); the network moves, per rail,
 * the vector of every host's count elements in host order, and rail r of
 * host n carries the data of rank collNetDenseToUserRank[n * nRails + r].
 * Each channel moves a window of chunkCount elements of that vector per
 * turn; a window may span hosts, so it is cut into pieces, one per host. */
#ifndef NCCLSIM_DEVICE_RAILS_H
#define NCCLSIM_DEVICE_RAILS_H

#include <stdbool.h>
#include <stdint.h>

#include "collective.h"

typedef struct {
    int nNodes, node, nRails, rank;
    int64_t count, chunk;     /* work->collnet: elements per rank, per window */
    int64_t first, stride;    /* this channel's first window, and the next one's distance */
    int32_t *denseToUser;     /* nNodes * nRails ranks */
    int64_t grid;             /* the turn's first element (railGridOffset); -1 before the first */
    int64_t beg, end;         /* the current window of the vector */
    bool inPlace;             /* AllGather: sendbuff is the rank's part of recvbuff */
} fc_rails;

/* One piece of a window: n elements at `off` in the window, which are the
 * rank's data from `user` on (the rank's part of a user buffer laid out by
 * rank), and whether that rank is this one. */
typedef struct {
    int64_t off, user, n;
    bool mine;
} fc_rail_piece;

/* From the work item and the device communicator; false (said why) when the
 * communicator's rail table is unreadable. nRails: the channel's heads. */
bool fc_rails_init(fc_rails *r, fc_coll *c, int nRails);
void fc_rails_fini(fc_rails *r);
/* Step to the next window of this channel: false past the vector's end. The
 * first call gives the first window. */
bool fc_rails_next(fc_rails *r);
/* The window's elements, and this host's part of it (at `beg` of the rank's
 * own buffer, n elements, n may be 0), as the network side sends or
 * receives it. */
static inline int64_t fc_rails_size(const fc_rails *r) { return r->end - r->beg; }
void fc_rails_own(const fc_rails *r, int64_t *beg, int64_t *n);
/* Pieces of the current window on rail `rail`: *at starts at 0. */
bool fc_rails_piece(const fc_rails *r, int rail, int64_t *at, fc_rail_piece *out);

/* fc_prims_process callbacks (ctx: fc_rails_step) for one window, whose
 * slots hold it as the network carries it. Source or destination i is rail
 * rail0 + i (mod nRails).
 * gather: each source's pieces into the output (when `user`), and the one
 * source's window as it is to every destination.
 * scatter: each destination gets the input's pieces of its rail (pre-op
 * applied; when `user`) reduced with every source's window. */
typedef struct {
    fc_rails *r;
    int rail0;
    bool user; /* the user's output (gather) or input (scatter) takes part */
} fc_rails_step;
void fc_rails_gather(fc_prims *p, void *ctx, char *const *srcs, int nsrcs, char *const *dsts, int ndsts);
void fc_rails_scatter(fc_prims *p, void *ctx, char *const *srcs, int nsrcs, char *const *dsts, int ndsts);

#endif
