/* The wake board: how many emulated GPUs of a host sleep on words of each
 * bucket of names, so that whoever writes a word makes the futex wake system
 * call only when someone may sleep on it.
 *
 * Most writes of a word a GPU may wait for find nobody asleep: the reader is
 * busy or has not got there yet (a 2 x 8 AllReduce of 128 MiB made ~78,000
 * wake calls and ~2,000 sleeps). A sleeper counts itself in its word's
 * bucket before it sleeps and out after; a writer, after its store, reads
 * the bucket. Both sides order the two with a full barrier, so either the
 * writer sees the count or the sleeper's futex sees the new value (and does
 * not sleep).
 *
 * Words are named by a key every process of the host computes alike for the
 * same bytes (the driver's fc_sim_memory_where, as for the time board);
 * buckets are shared, so two words may share one (a wake that finds nobody,
 * as before). Key 0 (a word the caller cannot name) always wakes, and a
 * sleeper on such a word makes every write wake. The board is a file all
 * processes of a host map (NCCLSIM_WAKE_BOARD, in the run directory); when
 * unset, or unusable, every write wakes, as without it. */
#ifndef NCCLSIM_COMMON_WAKE_BOARD_H
#define NCCLSIM_COMMON_WAKE_BOARD_H

#include <stdbool.h>
#include <stdint.h>

/* Before sleeping on the word named `key` (+1), and after (-1). */
void fc_wake_board_sleep(uint64_t key, int delta);

/* After writing the word named `key`: true when a sleeper may wait on it
 * (then wake it). */
bool fc_wake_board_may_sleep(uint64_t key);

#endif
