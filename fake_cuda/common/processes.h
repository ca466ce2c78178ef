/* Which processes use a simulated GPU, and how much of its memory: what NVML's
 * running-process listings report (nvidia-smi, gpustat, nvitop).
 *
 * Every process of a simulated host has a driver of its own, so the host's
 * processes meet in a directory beside the host's platform file
 * (dirname(NCCLSIM_PLATFORM)/processes): the driver of each process keeps one
 * file there, named by its pid, with a line `<bus id> <bytes>` per GPU it holds
 * a context or memory on, rewritten when that changes and removed at exit.
 * NVML reads them, skipping (and removing) files of processes that are gone.
 * Without a platform file (the built-in default) nothing is published. */
#ifndef NCCLSIM_PROCESSES_H
#define NCCLSIM_PROCESSES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "platform.h"

typedef struct fc_gpu_process {
    pid_t pid;
    uint64_t bytes;
} fc_gpu_process;

/* Driver side: this process now holds `bytes[d]` on GPU d of the platform
 * (`in_use[d]`: it has a context or memory there). */
void fc_processes_publish(const fc_platform *p, const int *in_use, const size_t *bytes);

/* NVML side: the live processes on `gpu`, at most `max` into out; returns how
 * many there are (which may exceed max). */
int fc_processes_on(const fc_gpu *gpu, fc_gpu_process *out, int max);

#endif
