/* The constants of the modelled time: what the simulated hardware costs.
 *
 * The values and their sources live in ncclsim/platform/timing.json;
 * fake_cuda/build.py compiles them into the table below and stops on a name
 * missing from either side. Units are in the names (us: microseconds, gbps:
 * GB/s, i.e. 10^9 bytes per second). */
#ifndef NCCLSIM_TIMING_H
#define NCCLSIM_TIMING_H

#define FC_TIMING_CONSTANTS(X)                                                                  \
    X(host_launch_us) X(host_call_us) X(gpu_launch_latency_us) X(gpu_kernel_gap_us)             \
    X(nvlink_gbps_per_link) X(nvlink_efficiency) X(nvls_efficiency) X(pcie_gbps_per_lane_gen3)    \
    X(pcie_gbps_per_lane_gen4) X(pcie_gbps_per_lane_gen5) X(pcie_efficiency) X(copy_latency_us) \
    X(hbm_gbps) X(payload_ll) X(payload_ll128) X(payload_simple) X(channel_gbps_ll)              \
    X(channel_gbps_ll128) X(channel_gbps_simple) X(step_latency_us_ll) X(step_latency_us_ll128) \
    X(step_latency_us_simple) X(step_latency_us_nvls) X(nic_efficiency) X(net_latency_us)       \
    X(collnet_switch_us) X(nvlink5_gbps_per_link)

typedef struct {
#define FC_TIMING_FIELD_(name) double name;
    FC_TIMING_CONSTANTS(FC_TIMING_FIELD_)
#undef FC_TIMING_FIELD_
} fc_timing_constants;

extern const fc_timing_constants fc_timing;

#endif
