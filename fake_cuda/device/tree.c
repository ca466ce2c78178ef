/* The Tree algorithm of AllReduce (all_reduce.h runTreeSplit). */
#include "algorithms.h"
#include "collective.h"

static void tree_loop(fc_coll *c, fc_prims *p, int kind)
{
    int64_t count, gridOffset, channelCount, chunkCount;
    fc_coll_part(c, &count, &gridOffset, &channelCount, &chunkCount);
    for (int64_t elemOffset = 0; elemOffset < channelCount; elemOffset += chunkCount) {
        int64_t offset = gridOffset + elemOffset, nelem = min64(chunkCount, channelCount - elemOffset);
        switch (kind) {
        case 0: FC_RECV_REDUCE_COPY_SEND(p, offset, offset, nelem, true); break; /* root */
        case 1: FC_SEND(p, offset, nelem); break;                                 /* leaf, up */
        case 2: FC_RECV_REDUCE_SEND(p, offset, nelem); break;                     /* middle, up */
        case 3: FC_RECV(p, offset, nelem, false); break;                          /* leaf, down */
        default: FC_RECV_COPY_SEND(p, offset, nelem); break;                      /* middle, down */
        }
    }
}

/* runTreeSplit: the root reduces and broadcasts in one pass; every other rank
 * reduces up and broadcasts down at the same time (two groups of warps). */
enum { UP, DOWN };
static const char *const half_names[] = {"reduce up", "broadcast down"};

static void tree_half(fc_coll *c, int half)
{
    const fc_nccl_channel *ch = c->ch;
    fc_prims_cfg cfg = fc_coll_cfg(c, 1, 1);
    fc_prims p;
    bool leaf = ch->tree_down[0] < 0, up = half == UP;
    bool ok = up ? fc_prims_init(&p, c->e, c->t, ch, c->who, &cfg, ch->tree_down, 3, &ch->tree_up, 1,
                                 c->w->coll.sendbuff, c->w->coll.recvbuff, c->op)
                 : fc_prims_init(&p, c->e, c->t, ch, c->who, &cfg, &ch->tree_up, 1, ch->tree_down, 3,
                                 c->w->coll.sendbuff, c->w->coll.recvbuff, c->op);
    if (!ok) return;
    tree_loop(c, &p, up ? (leaf ? 1 : 2) : (leaf ? 3 : 4));
    fc_prims_fini(&p);
}

void fc_allreduce_tree(fc_coll *c)
{
    const fc_nccl_channel *ch = c->ch;
    if (ch->tree_up < 0) {
        fc_prims_cfg cfg = fc_coll_cfg(c, 1, 1);
        fc_prims p;
        if (!fc_prims_init(&p, c->e, c->t, ch, c->who, &cfg, ch->tree_down, 3, ch->tree_down, 3, c->w->coll.sendbuff,
                           c->w->coll.recvbuff, c->op))
            return;
        tree_loop(c, &p, 0);
        fc_prims_fini(&p);
        return;
    }
    static const int halves[] = {UP, DOWN};
    fc_coll_run_roles(c, tree_half, halves, half_names, 2);
}
