/* Large zero fills that take no memory where none is in use (the driver's
 * memset of device memory, the host library's memset): pages out of memory
 * (never written, or swapped out) are given back, which reads as zeros and
 * holds nothing; pages in memory are written, since their owner is using them
 * and given back each would fault in again at its next write (nccl-tests
 * zeroes its 128 MiB result buffers before every check). Header only: the
 * host library links no code of the others. */
#ifndef NCCLSIM_ZERO_RUNS_H
#define NCCLSIM_ZERO_RUNS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/mman.h>

/* Zero `bytes` at `run` one way; false: this way cannot (give back only). */
typedef bool fc_zero_run_fn(char *run, size_t bytes, void *ctx);

#define FC_ZERO_RESIDENCY_PAGES 4096 /* pages asked about per mincore */

/* Zero the `n` pages at page-aligned `at`: each run of pages in memory by
 * `write`, each other run by `give_back`; from a run it refuses on, all by
 * `write`. Pages whose residency mincore cannot tell count as out of memory
 * (no memset here: in the host library that would be its own). */
static inline void fc_zero_runs(char *at, size_t n, size_t page, fc_zero_run_fn *write, fc_zero_run_fn *give_back,
                                void *ctx)
{
    unsigned char in[FC_ZERO_RESIDENCY_PAGES];
    for (size_t first = 0; first < n; first += FC_ZERO_RESIDENCY_PAGES) {
        size_t k = n - first < FC_ZERO_RESIDENCY_PAGES ? n - first : FC_ZERO_RESIDENCY_PAGES;
        char *base = at + first * page;
        if (mincore(base, k * page, in) != 0) {
            if (give_back(base, k * page, ctx)) continue;
            write(base, (size_t)(at + n * page - base), ctx);
            return;
        }
        for (size_t i = 0; i < k;) {
            size_t j = i;
            while (j < k && (in[j] & 1) == (in[i] & 1)) j++;
            char *run = base + i * page;
            if (in[i] & 1) {
                write(run, (j - i) * page, ctx);
            } else if (!give_back(run, (j - i) * page, ctx)) {
                write(run, (size_t)(at + n * page - run), ctx);
                return;
            }
            i = j;
        }
    }
}

#endif
