/* The wake board (wake_board.h): counters of sleepers by bucket, in a file
 * every process of a host maps. */
#include "wake_board.h"

#include <pthread.h>
#include <stdlib.h>

#include "host_file.h"
#include "log.h"

#define BUCKET_BITS 16 /* 256 KiB; only the buckets touched cost memory */
#define BUCKETS (1u << BUCKET_BITS)
#define ANY_WORD 0 /* the bucket of sleepers on words without a key: every write wakes them */

static uint32_t *board; /* NULL: every write wakes */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool mapped; /* map_board has run: no call to pthread_once on every write */

static void map_board(void)
{
    const char *path = getenv("NCCLSIM_WAKE_BOARD");
    if (path && *path) {
        board = fc_host_file_map(path, BUCKETS * sizeof *board);
        if (!board)
            fc_log_fatal_config("cannot map the wake board %s; every write of a word wakes its sleepers", path);
    }
    __atomic_store_n(&mapped, true, __ATOMIC_RELEASE);
}

static void map_once(void)
{
    if (!__atomic_load_n(&mapped, __ATOMIC_ACQUIRE)) pthread_once(&once, map_board);
}

static uint32_t *bucket(uint64_t key)
{
    if (!key) return &board[ANY_WORD];
    uint32_t b = (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - BUCKET_BITS)); /* high bits mix the whole key */
    return &board[b ? b : 1];
}

void fc_wake_board_sleep(uint64_t key, int delta)
{
    map_once();
    if (board) __atomic_fetch_add(bucket(key), (uint32_t)delta, __ATOMIC_SEQ_CST); /* a full barrier */
}

bool fc_wake_board_may_sleep(uint64_t key)
{
    map_once();
    if (!board || !key) return true;
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* the word's store before the counts' loads */
    return __atomic_load_n(bucket(key), __ATOMIC_RELAXED) || __atomic_load_n(&board[ANY_WORD], __ATOMIC_RELAXED);
}
