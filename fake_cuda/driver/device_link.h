/* The boundary between the simulated driver (driver/) and the emulation of
 * NCCL's device side (device/), which link into one libcuda.so.1. The driver
 * hands NCCL's kernel launches over through the one hook below; the emulation
 * uses the driver only through the services declared here, never its
 * internal state (internal.h). */
#ifndef NCCLSIM_DRIVER_DEVICE_LINK_H
#define NCCLSIM_DRIVER_DEVICE_LINK_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mem_ref.h"

struct CUstream_st;

/* ---- driver -> device: implemented in device/kernel_launch.c ---- */

/* launch.c's hook for a kernel whose name contains "ncclDevKernel_": decodes
 * what can only be read now (the argument block and the work items, which
 * NCCL reuses once the launch returns) and queues on `s` the kernel's
 * emulation, which reads the device communicator in stream order. A launch
 * the emulation cannot play (an NCCL release outside the table, work it does
 * not implement) fails with CUDA_ERROR_NOT_SUPPORTED and one message on
 * stderr, rather than hang later. */
CUresult fc_nccl_on_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           struct CUstream_st *s, void **kernelParams, void **extra);

/* ---- device -> driver: implemented in driver/ ---- */

/* memory.c: bytes from addr to the end of the range of simulated memory
 * (device or registered host memory) that holds it; 0 when none does.
 * Simulated memory is identity mapped: addr can be dereferenced. */
size_t fc_sim_memory_span(uintptr_t addr);

/* memory.c: whose memory addr is (a device ordinal, FC_WHERE_HOST, or
 * FC_WHERE_NONE when no simulated memory holds it), and *key: a name for
 * those bytes that every process of the host mapping them computes alike
 * (the time board's key, common/time_board.h; 0 for none). */
enum { FC_WHERE_HOST = -1, FC_WHERE_NONE = -2 };
int fc_sim_memory_where(uintptr_t addr, uint64_t *key);

/* memory.c: a count that moves whenever simulated memory of this process
 * goes away or a multicast team's memory is mapped anew (a range leaves
 * the registry, a binding changes): answers of the lookups above and of
 * fc_multicast_view got while it stays are still right. */
uint64_t fc_sim_memory_generation(void);

/* memory_refs.c, references to simulated memory (common/mem_ref.h): one to
 * [addr, addr+len); false when no file backs the whole range. */
bool fc_mem_ref_make(uintptr_t addr, size_t len, fc_mem_ref *out);
/* The referenced bytes, readable in this process for `len` bytes until
 * fc_mem_ref_release(*hold); NULL when they cannot be mapped. */
const void *fc_mem_ref_open(const fc_mem_ref *r, size_t len, void **hold);
/* The same, to write them (NULL also when the file opens read-only). */
void *fc_mem_ref_open_writable(const fc_mem_ref *r, size_t len, void **hold);
void fc_mem_ref_release(void *hold);
/* This process's pid, as references name it (getpid() without a system call). */
int32_t fc_mem_ref_self(void);

/* zero_source.c: a read-only stand-in for addr where no byte from addr to
 * the end of its range of simulated memory was ever written (a hole of its
 * file, which reads as zeros): the same zeros, read without allocating
 * pages for them; 0 when there is data there, the range is small or no
 * file backs it. Valid for the process's life. */
uintptr_t fc_zero_stand_in(uintptr_t addr);

/* multicast.c: the memory behind a multicast mapping. Copy i of an address x
 * of the mapping, on the i-th device of the object's team, is x + delta[i],
 * mapped in this process (it can be dereferenced). */
#define FC_MC_MAX_TEAM 64
typedef struct fc_mc_view {
    int n; /* the team's size */
    intptr_t delta[FC_MC_MAX_TEAM];
    /* the key (fc_sim_memory_where) of copy i of x is x + key_delta[i], 0: none (fc_mc_copy_key) */
    int64_t key_delta[FC_MC_MAX_TEAM];
    /* the file behind copy i: process pid[i]'s descriptor fd[i], inode
     * ino[i]; x is at x + file_delta[i] in it (fc_mc_copy_ref) */
    int32_t pid[FC_MC_MAX_TEAM], fd[FC_MC_MAX_TEAM];
    uint64_t ino[FC_MC_MAX_TEAM];
    int64_t file_delta[FC_MC_MAX_TEAM];
} fc_mc_view;
/* The key (fc_sim_memory_where) of copy i of multicast address x: 0 when
 * the copy has none. The copies are mapped apart from the registry, which
 * names only x. */
static inline uint64_t fc_mc_copy_key(const fc_mc_view *v, uintptr_t x, int i)
{
    return v->key_delta[i] ? (uint64_t)((int64_t)x + v->key_delta[i]) : 0;
}
/* A reference (memory_refs.c) to copy i of multicast address x. */
static inline fc_mem_ref fc_mc_copy_ref(const fc_mc_view *v, uintptr_t x, int i, int32_t self)
{
    return (fc_mem_ref){.pid = v->pid[i], .fd = v->fd[i], .ino = v->ino[i],
                        .offset = (uint64_t)((int64_t)x + v->file_delta[i]), .local_pid = self,
                        .addr = (uint64_t)((intptr_t)x + v->delta[i])};
}
/* 1 with *view set when [addr, addr+len) lies in a multicast mapping every
 * member has bound memory to (the view stays valid while it is mapped); 0
 * when addr is no multicast address; -1 while a member has not bound yet. */
int fc_multicast_view(uintptr_t addr, size_t len, const fc_mc_view **view);

/* modules.c: the function's name ("?" for an invalid handle). */
const char *fc_function_name(CUfunction f);

/* streams.c: the stream's id, as traces name it, and its context's device. */
unsigned long long fc_stream_id(const struct CUstream_st *s);
int fc_stream_device(const struct CUstream_st *s);
/* streams.c: run fn(copy of arg) after everything queued before on s. When
 * the stream is idle and `inline_ok` (the operation cannot block), it runs at
 * once in the caller. Returns false when out of memory. */
typedef void (*fc_op_fn)(void *arg);
bool fc_stream_enqueue(struct CUstream_st *s, fc_op_fn fn, const void *arg, size_t arg_size,
                       bool inline_ok);

/* modelled_time.c: modelled time (NCCLSIM_CLOCK=model), in nanoseconds of
 * the run's modelled clock. False: time is real, and the functions below
 * answer 0 and change nothing. */
bool fc_time_modelled(void);
uint64_t fc_time_ns(double us);
/* Inside a stream operation: when it can start (the stream done with the
 * previous one, the host done submitting it); for a kernel, with the launch
 * latency and the gap after the previous kernel. */
uint64_t fc_time_op_start(void);
uint64_t fc_time_kernel_start(void);
/* Inside a stream operation: it ends no earlier than t. */
void fc_time_op_end(uint64_t t);
/* GB/s of payload the PCIe link of device dev carries each way. */
double fc_time_pcie_gbps(int dev);

#endif
