/* What the preloaded host library's replacements of libc functions share:
 * exporting them, and reaching the definition they replace. */
#ifndef NCCLSIM_HOST_INTERPOSE_H
#define NCCLSIM_HOST_INTERPOSE_H

#include <dlfcn.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#define EXPORT __attribute__((visibility("default")))

/* Declares fn_: the next definition of `name` (libc's), looked up once. */
#define REAL(name)                                                                         \
    static __typeof__(name) *real_;                                                        \
    __typeof__(name) *fn_ = __atomic_load_n(&real_, __ATOMIC_RELAXED);                     \
    if (!fn_) {                                                                            \
        fn_ = (__typeof__(name) *)dlsym(RTLD_NEXT, #name);                                 \
        __atomic_store_n(&real_, fn_, __ATOMIC_RELAXED);                                   \
    }

/* idle_wait.c: sched_yield without the sleep of an idle proxy thread. */
int host_yield(void);

/* idle_wait.c: which thread calls, by the name NCCL gives its threads
 * (NCCL_SET_THREAD_NAME=1): a proxy progress thread, another of NCCL's
 * (service, UDS), or any other (a rank's own, NCCL's init jobs). */
enum host_thread { HOST_THREAD_OTHER, HOST_THREAD_PROGRESS, HOST_THREAD_NCCL };
enum host_thread host_thread_kind(void);

/* callers.c: the library a return address lies in (cached by code page):
 * NCCL's own (libnccl.so), one whose clock reads stay real (NCCL, its net
 * plugins, the simulated driver and NVML, MPI, this library), the C++
 * runtime, and MPI (libmpi, libpmpi). */
#define HOST_CALLER_NCCL 1u
#define HOST_CALLER_REAL_TIME 2u
#define HOST_CALLER_CXX_RUNTIME 4u /* libstdc++ */
#define HOST_CALLER_MPI 8u
unsigned host_caller(const void *ret);

/* idle_wait.c: the sleep to take for a sleep of `req` called from `ret`
 * (NCCL's polling sleeps last longer); `req` itself or `*longer`. */
const struct timespec *host_sleep_length(const void *ret, const struct timespec *req, struct timespec *longer);

/* zero_fill.c: the two ways fc_zero_runs (zero_runs.h) zeroes a run of
 * pages. host_write_zeros writes them; host_give_back punches a hole in tmpfs
 * or drops private anonymous pages (those of a fill or copy of at least
 * PUNCH_PRIVATE_MIN bytes, *(size_t *)ctx), false for any other memory. */
bool host_write_zeros(char *run, size_t bytes, void *ctx);
bool host_give_back(char *run, size_t bytes, void *ctx);
/* host_give_back for data that arrived (zero_copy.c), which is read next
 * (sent on, parsed): private pages given back are mapped to the zero page in
 * one call, not faulted in one by one at their first read. */
bool host_give_back_readable(char *run, size_t bytes, void *ctx);

/* private_memory.c: whether all of [p, p + n) is private anonymous memory;
 * drop its pages (they read as zeros) if so. */
bool host_private_anonymous(void *p, size_t n);
bool host_drop_private(void *p, size_t n);
/* private_memory.c: whether the `n` bytes at `p` (a multiple of 64) are all zero. */
bool host_all_zero(const char *p, size_t n);

/* private_memory.c: for each of the `n` pages from `lo`, whether it may hold
 * data: in memory or swapped out (/proc/self/pagemap); the others were never
 * written or were dropped, and read as zeros. Where pagemap cannot be read,
 * every page may. */
void host_pages_held(const char *lo, size_t n, bool *held);

/* placed_memory.c: `bytes` (a multiple of the page) of zeros at the address
 * the other processes of the run give an allocation of that size made in the
 * same order; NULL where there is none (the allocator's then). */
void *host_place(size_t bytes);
/* placed_memory.c: whether p lies where placed allocations go; the size of
 * the placed allocation that starts at p (0: none); taking it back (false:
 * none starts at p). */
bool host_placed(uintptr_t p);
size_t host_placed_size(uintptr_t p);
bool host_unplace(uintptr_t p);

/* shared_pages.c: NCCL's large callocs shared among the processes of a run.
 * A region [lo, hi) is looked at `when`: early, by its thread, which may
 * still be writing it (`resident_before`: its pages in memory at the last
 * look, -1 at the first, updated); now, the region being as written as it
 * will be (its thread idles or ends); or at a kernel launch of NCCL's (its
 * init is over). It is shared (SHARE_DONE: also where it cannot be), or not
 * yet: nothing written (SHARE_LATER_UNWRITTEN), a large sparse region that
 * grew since or holds too little yet (SHARE_LATER_SPARSE); a small sparse
 * one of NCCL's init, filled piece by piece until its end, is shared and
 * looked at again at a launch (SHARE_AT_LAUNCH). */
enum look_time { LOOK_EARLY, LOOK_NOW, LOOK_AT_LAUNCH };
enum shared { SHARE_DONE, SHARE_LATER_UNWRITTEN, SHARE_LATER_SPARSE, SHARE_AT_LAUNCH };
enum shared host_share_region(uintptr_t lo, uintptr_t hi, enum look_time when, long *resident_before);
/* shared_pages.c: whether a calloc of NCCL's of `bytes` is to be shared (a
 * store is set, and it is large enough). */
bool host_share_wanted(size_t bytes);

/* pending_regions.c: the regions waiting to be shared. A region is noted
 * once allocated and forgotten when freed (free waits where it is being
 * shared). At the thread's next memset (host_share_due) or calloc, its own
 * regions written since are shared where dense (host_share_pending); when
 * it idles, all its own (host_share_idle). */
void host_note_region(uintptr_t lo, uintptr_t hi);
void host_forget_region(uintptr_t lo);
bool host_share_due(void);
void host_share_pending(void);
void host_share_idle(void);

/* zero_copy.c: recv() of `n` bytes into `buf` by `real` (libc's) that gives
 * back the pages of `buf` (up to HOST_RECV_PAGES) that were out of memory
 * and received only zeros; called from `caller` (a return address): NCCL's
 * own receives into those pages go through a scratch buffer instead of
 * faulting them in. */
#define HOST_RECV_PAGES 4096
typedef ssize_t recv_fn(int fd, void *buf, size_t n, int flags);
ssize_t host_recv(recv_fn *real, int fd, void *buf, size_t n, int flags, const void *caller);

/* join_wake.c: a poll of `timeout` ms (NCCL's, from one of its threads) that
 * a pthread_join of the calling thread ends early, returning 0 as a timeout
 * would; HOST_LONG_POLL_MS or longer, or without a limit. */
#define HOST_LONG_POLL_MS 100
int host_poll_wakeable(int (*real_poll)(struct pollfd *, nfds_t, int), struct pollfd *fds, nfds_t n, int timeout);

/* zero_copy.c: whether fd is a stream socket (of any family). */
bool host_stream_socket(int fd);

/* local_sockets.c: after a connection was accepted on listen_fd into `addr`
 * of `room` bytes, the peer address NCCL asked for (a Unix socket in the
 * place of its TCP listener reports the listener's own address). */
void host_accepted(int listen_fd, struct sockaddr *addr, socklen_t *len, socklen_t room);

#endif
