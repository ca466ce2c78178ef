/* Modelled time of the network's messages (net_time.h). */
#include "net_time.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "net_memory.h"
#include "platform.h"
#include "time_board.h"
#include "timing.h"

static bool on;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
    const char *c = getenv("NCCLSIM_CLOCK");
    on = c && !strcmp(c, "model") && fcn_memory_named();
}

bool fcn_time_on(void)
{
    pthread_once(&once, load);
    return on;
}

static uint64_t ns(double us) { return (uint64_t)(us * 1000.0 + 0.5); }

static const fc_nic *nic_of(int dev)
{
    const fc_platform *p = fc_platform_get();
    return p && dev >= 0 && dev < p->nnics ? &p->nic[dev] : NULL;
}

/* The bytes' time on the NIC's link (at its payload rate). */
static uint64_t wire_ns(int dev, size_t bytes)
{
    const fc_nic *nic = nic_of(dev);
    double gbps = (nic ? nic->speed_mbps : 400000) / 8000.0 * fc_timing.nic_efficiency; /* Mb/s -> GB/s */
    return (uint64_t)((double)bytes / gbps);
}

/* From NIC to NIC through the fabric. */
static uint64_t latency_ns(int dev)
{
    const fc_nic *nic = nic_of(dev);
    return ns(fc_timing.net_latency_us + (nic ? nic->latency_us : 0));
}

/* The NIC busy sending `bytes` of `data` from when they are ready: the start. */
static uint64_t reserve(int dev, const void *data, size_t bytes, uint64_t busy)
{
    uint64_t ready = bytes ? fc_board_get(fcn_memory_key(data), FC_BOARD_READY) : 0;
    /* the NIC's entry on the board: a key no memory has (memory keys are below 2^63) */
    return fc_board_reserve((1ull << 63) | (1ull << 62) | (uint64_t)dev, ready, busy);
}

void fcn_time_send(int dev, const void *data, size_t size, uint64_t *arrive, uint64_t *sent)
{
    *arrive = *sent = 0;
    if (!fcn_time_on()) return;
    uint64_t busy = wire_ns(dev, size);
    *sent = reserve(dev, data, size, busy) + busy;
    *arrive = *sent + latency_ns(dev);
}

void fcn_time_upload(int dev, const void *data, size_t bytes, uint64_t *start, uint64_t *end)
{
    *start = *end = 0;
    if (!fcn_time_on()) return;
    uint64_t busy = wire_ns(dev, bytes);
    *start = reserve(dev, data, bytes, busy);
    *end = *start + busy;
}

uint64_t fcn_time_reduced(int dev, uint64_t last_end, uint64_t start, size_t down)
{
    if (!fcn_time_on()) return 0;
    uint64_t streamed = start + wire_ns(dev, down); /* the result cannot come back faster than its bytes */
    return (last_end > streamed ? last_end : streamed) + 2 * latency_ns(dev) + ns(fc_timing.collnet_switch_us);
}

void fcn_time_sent(const void *data, uint64_t sent)
{
    if (fcn_time_on() && sent) fc_board_put(fcn_memory_key(data), FC_BOARD_FREE, sent);
}

void fcn_time_received(const void *data, uint64_t arrive)
{
    if (!fcn_time_on() || !arrive) return;
    uint64_t key = fcn_memory_key(data), freed = fc_board_get(key, FC_BOARD_FREE);
    fc_board_put(key, FC_BOARD_READY, arrive > freed ? arrive : freed);
}
