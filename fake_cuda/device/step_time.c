/* Modelled time of the primitives' steps (step_time.h). */
#include "step_time.h"

#include "emu_state.h"
#include "platform.h"
#include "time_board.h"
#include "timeline.h"
#include "timing.h"

static double payload(int proto)
{
    return proto == FC_NCCL_PROTO_LL ? fc_timing.payload_ll
         : proto == FC_NCCL_PROTO_LL128 ? fc_timing.payload_ll128 : fc_timing.payload_simple;
}

static double channel_gbps(int proto)
{
    return proto == FC_NCCL_PROTO_LL ? fc_timing.channel_gbps_ll
         : proto == FC_NCCL_PROTO_LL128 ? fc_timing.channel_gbps_ll128 : fc_timing.channel_gbps_simple;
}

static double step_latency_us(int proto)
{
    return proto == FC_NCCL_PROTO_LL ? fc_timing.step_latency_us_ll
         : proto == FC_NCCL_PROTO_LL128 ? fc_timing.step_latency_us_ll128 : fc_timing.step_latency_us_simple;
}

static const fc_gpu *gpu_of(int dev)
{
    const fc_platform *pl = fc_platform_get();
    return pl && dev >= 0 && dev < pl->ngpus ? &pl->gpu[dev] : NULL;
}

/* NVLink bandwidth from GPU a towards GPU b: the links between them, or
 * through NVSwitches every link a has to a switch; 0 when none. */
static double nvlink_gbps_of(const fc_gpu *a, const fc_gpu *b)
{
    if (!a || !b) return 0;
    int direct = 0, other = 0;
    for (int i = 0; i < a->nvlinks; i++) {
        const fc_pci_addr *r = &a->nvlink_remote[i];
        bool to_b = r->domain == b->pci.domain && r->bus == b->pci.bus && r->device == b->pci.device;
        if (to_b) direct++;
        else other++;
    }
    const fc_platform *pl = fc_platform_get();
    bool to_gpu = false; /* do the other links go to GPUs (not switches)? */
    for (int i = 0; pl && i < a->nvlinks && !direct; i++)
        for (int k = 0; k < pl->ngpus; k++)
            if (pl->gpu[k].pci.bus == a->nvlink_remote[i].bus && pl->gpu[k].pci.domain == a->nvlink_remote[i].domain)
                to_gpu = true;
    int links = direct ? direct : to_gpu ? 0 : other;
    double per_link = a->model && a->model->nvlink_version >= 5 ? fc_timing.nvlink5_gbps_per_link
                                                                : fc_timing.nvlink_gbps_per_link;
    return links * per_link * fc_timing.nvlink_efficiency;
}

/* The same by ordinals, worked out once per pair (the platform does not change). */
static double nvlink_gbps(int a, int b)
{
    static double known[FC_MAX_GPUS][FC_MAX_GPUS]; /* the rate + 1: 0 is "not yet" */
    if (a < 0 || b < 0 || a >= FC_MAX_GPUS || b >= FC_MAX_GPUS) return 0;
    double v;
    __atomic_load(&known[a][b], &v, __ATOMIC_RELAXED);
    if (v == 0) { /* racing threads compute the same value */
        v = nvlink_gbps_of(gpu_of(a), gpu_of(b)) + 1;
        __atomic_store(&known[a][b], &v, __ATOMIC_RELAXED);
    }
    return v - 1;
}

/* The keys of a slot: itself, or each copy of a multicast one (arithmetic
 * on the view: no lookup). */
static int slot_keys(const fc_step_slot *s, uint64_t *keys, int *where)
{
    if (!s->mc) {
        *where = fc_sim_memory_where(s->at, &keys[0]);
        return keys[0] ? 1 : 0;
    }
    int n = 0;
    for (int i = 0; i < s->mc->n; i++)
        if ((keys[n] = fc_mc_copy_key(s->mc, s->at, i))) n++; /* 0: the copy has no key */
    *where = FC_WHERE_NONE;
    return n;
}

void fc_step_time(fc_prims *p, const fc_step_slot *recv, int nrecv, const fc_step_slot *send, int nsend,
                  int64_t bytes)
{
    if (!p->e->timed) return;
    const fc_nccl_launch *l = p->e->l;
    uint64_t *now = fc_task_now(p->t), start = *now;
    double wire = bytes > 0 ? (double)bytes / payload(p->proto) : 0, nch = l->nchannels > 0 ? l->nchannels : 1;
    /* link time by direction (0: out of this GPU, 1: into it); the two run at once */
    double nvlink_ns[2] = {0, 0}, pcie_ns[2] = {0, 0};
    bool crossed = false, multicast = false;
    uint64_t single[2 * FC_PRIMS_MAX_PEERS]; /* a plain slot's key, for the second pass */
    for (int i = 0; i < nrecv + nsend; i++) {
        bool is_recv = i < nrecv;
        const fc_step_slot *s = is_recv ? &recv[i] : &send[i - nrecv];
        uint64_t keys[FC_MC_MAX_TEAM];
        int where, nkeys = slot_keys(s, keys, &where);
        single[i] = s->mc ? 0 : keys[0];
        for (int k = 0; k < nkeys; k++) {
            uint64_t t = fc_board_get(keys[k], is_recv ? FC_BOARD_READY : FC_BOARD_FREE);
            if (t > start) start = t;
        }
        int dir = is_recv ? 1 : 0; /* reading a remote slot brings data in, writing one sends it out */
        if (s->mc) {
            /* A multicast load-reduce reads the slot out of every member's
             * port, a multicast store writes it into every member's: each
             * port carries the slot once for each of the team's heads, whose
             * flows share it. */
            nvlink_ns[is_recv ? 0 : 1] +=
                wire * s->mc->n / (nvlink_gbps(l->device, l->device) * fc_timing.nvls_efficiency / nch);
            crossed = multicast = true;
        } else if (where == FC_WHERE_HOST) {
            pcie_ns[dir] += wire / (fc_time_pcie_gbps(l->device) / nch);
            crossed = true;
        } else if (where >= 0 && where != l->device) {
            double nv = nvlink_gbps(l->device, where);
            if (nv > 0) nvlink_ns[dir] += wire / (nv / nch);
            else pcie_ns[dir] += wire / (fc_time_pcie_gbps(l->device) / nch);
            crossed = true;
        }
    }
    /* the block's own rate: it writes the step once per destination (GB/s = bytes/ns) */
    double ns = wire * (nsend > 1 ? nsend : 1) / channel_gbps(p->proto);
    for (int d = 0; d < 2; d++) {
        if (nvlink_ns[d] > ns) ns = nvlink_ns[d];
        if (pcie_ns[d] > ns) ns = pcie_ns[d];
    }
    /* The flow is busy while its bytes go out; what it wrote (and the
     * credit for what it read) reaches the peer a hop's latency later, while
     * the flow goes on with its next step: a pipeline keeps the link busy. */
    double latency_us = multicast ? fc_timing.step_latency_us_nvls : crossed ? step_latency_us(p->proto) : 0;
    uint64_t end = start + (uint64_t)ns, seen = end + fc_time_ns(latency_us);
    for (int i = 0; i < nrecv + nsend; i++) {
        bool is_recv = i < nrecv;
        const fc_step_slot *s = is_recv ? &recv[i] : &send[i - nrecv];
        uint64_t keys[FC_MC_MAX_TEAM];
        int where, nkeys = s->mc ? slot_keys(s, keys, &where) : (keys[0] = single[i]) != 0;
        for (int k = 0; k < nkeys; k++) fc_board_put(keys[k], is_recv ? FC_BOARD_FREE : FC_BOARD_READY, seen);
    }
    *now = end;
    if (fc_timeline_steps()) {
        int from[FC_PRIMS_MAX_PEERS], to[FC_PRIMS_MAX_PEERS];
        for (int i = 0; i < nrecv; i++) from[i] = recv[i].peer;
        for (int i = 0; i < nsend; i++) to[i] = send[i].peer;
        fc_timeline_step(l, p->channel, p->proto, from, nrecv, to, nsend, start, end, bytes);
    }
}
