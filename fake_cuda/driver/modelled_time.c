/* Modelled time in the driver (NCCLSIM_CLOCK=model; see device_link.h).
 *
 * The program's clock is libncclsim-host.so's (ncclsim_clock_*,
 * host_lib.h): calls charge it their host cost, waits move it to the modelled
 * completion of what was waited for. Each stream has a timeline: an
 * operation starts when the stream has finished the previous one and the
 * host has submitted it, and ends when its modelled work is done (a copy's
 * transfer, an NCCL kernel's last step). Without the host library, or with
 * NCCLSIM_CLOCK unset, everything here is inert and time stays real. */
#include "host_lib.h"
#include "internal.h"
#include "timing.h"

static bool clk_on;
static pthread_once_t clk_once = PTHREAD_ONCE_INIT;

static void clk_load(void)
{
    clk_on = ncclsim_clock_modelled && ncclsim_clock_now && ncclsim_clock_advance && ncclsim_clock_reach &&
             ncclsim_clock_gpu_work && ncclsim_clock_modelled();
}

bool fc_time_modelled(void)
{
    pthread_once(&clk_once, clk_load);
    return clk_on;
}

uint64_t fc_time_ns(double us) { return us > 0 ? (uint64_t)(us * 1000.0 + 0.5) : 0; }

uint64_t fc_time_host_now(void) { return fc_time_modelled() ? ncclsim_clock_now() : 0; }

void fc_time_host_charge(double us)
{
    if (fc_time_modelled()) ncclsim_clock_advance(fc_time_ns(us));
}

void fc_time_host_reach(uint64_t t)
{
    if (fc_time_modelled()) ncclsim_clock_reach(t);
}

void fc_time_gpu_work(long delta)
{
    if (fc_time_modelled()) ncclsim_clock_gpu_work(delta);
}

/* ---- the operation a stream is running (on the thread running it) ---- */

static __thread fc_time_op_state op;

fc_time_op_state fc_time_op_begin(uint64_t stream_done, uint64_t submit)
{
    fc_time_op_state outer = op;
    op.stream_done = stream_done;
    op.submit = submit;
    op.end = fc_time_op_start();
    return outer;
}

uint64_t fc_time_op_finish(fc_time_op_state outer)
{
    uint64_t end = op.end;
    op = outer;
    return end;
}

uint64_t fc_time_op_start(void) { return op.stream_done > op.submit ? op.stream_done : op.submit; }

uint64_t fc_time_kernel_start(void)
{
    uint64_t after_prev = op.stream_done + fc_time_ns(fc_timing.gpu_kernel_gap_us);
    uint64_t after_launch = op.submit + fc_time_ns(fc_timing.gpu_launch_latency_us);
    return after_prev > after_launch ? after_prev : after_launch;
}

void fc_time_op_end(uint64_t t)
{
    if (t > op.end) op.end = t;
}

/* ---- copies ---- */

double fc_time_pcie_gbps(int dev)
{
    const fc_platform *p = fc_platform_get();
    const fc_gpu *g = p && dev >= 0 && dev < p->ngpus ? &p->gpu[dev] : NULL;
    int gen = g ? g->pcie_gen : 4, width = g ? g->pcie_width : 16;
    double lane = gen >= 5 ? fc_timing.pcie_gbps_per_lane_gen5
                : gen == 4 ? fc_timing.pcie_gbps_per_lane_gen4
                           : fc_timing.pcie_gbps_per_lane_gen3;
    return lane * width * fc_timing.pcie_efficiency;
}

void fc_time_copy(const void *dst, const void *src, size_t bytes)
{
    if (!fc_time_modelled()) return;
    fc_alloc d, s;
    bool dev_d = fc_registry_find((uintptr_t)dst, &d) && d.kind != FC_MEM_HOST_ALLOC && d.kind != FC_MEM_HOST_REGISTERED;
    bool dev_s = fc_registry_find((uintptr_t)src, &s) && s.kind != FC_MEM_HOST_ALLOC && s.kind != FC_MEM_HOST_REGISTERED;
    /* device to device: HBM read and write; otherwise across PCIe (host to host: as fast as PCIe, a bound) */
    double gbps = dev_d && dev_s ? fc_timing.hbm_gbps / 2 : fc_time_pcie_gbps(dev_d ? d.device : dev_s ? s.device : 0);
    fc_time_op_end(fc_time_op_start() + fc_time_ns(fc_timing.copy_latency_us) + (uint64_t)((double)bytes / gbps));
}
