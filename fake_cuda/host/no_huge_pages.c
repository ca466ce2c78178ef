/* Part of libncclsim-host.so: a rank process takes no transparent huge pages.
 *
 * NCCL writes a word here and there in large zeroed allocations: a counter in
 * each of its per-channel structures for every rank of the communicator, the
 * link of each operation in its proxy's 64 MiB pool. With 4 KiB pages those
 * writes hold a page each; where the machine gives transparent huge pages to
 * every allocation (`enabled` = always, the default of some distributions)
 * they hold 2 MiB each: 8 x 8 simulated GPUs with a process per host took
 * 7.9 GB at their peak instead of 5.5 GB (5.1 GB of it huge pages), and ran
 * slower, zeroing them. A simulated rank's memory is what limits how many fit
 * on a machine, so the host library turns them off for the process (and the
 * processes it starts) as it loads; machines set to `madvise` or `never`
 * see no change. */
#include <sys/prctl.h>

__attribute__((constructor)) static void no_huge_pages(void)
{
    prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0); /* a kernel without it (before 3.15): as before */
}
