/* The time board: when each step's data became ready and when its buffer
 * slot became free again, in modelled time, beside the data itself.
 *
 * A step's producer (an emulated kernel writing a slot, the net plugin
 * delivering a message) writes the slot's ready time before it posts the
 * step; the consumer reads it after it saw the post, and writes the slot's
 * free time before it gives the credit back, which the producer reads before
 * it writes the slot again. So, like the data, each value is written before
 * the counter that announces it and read after: no other ordering is needed.
 *
 * Slots are named by a key every process of a host computes alike for the
 * same bytes (the driver's fc_sim_memory_where). The board is a table in a
 * file all processes of a simulated host map (NCCLSIM_TIME_BOARD, in the run
 * directory), or private to the process when unset. */
#ifndef NCCLSIM_TIME_BOARD_H
#define NCCLSIM_TIME_BOARD_H

#include <stdbool.h>
#include <stdint.h>

enum { FC_BOARD_READY = 0, FC_BOARD_FREE = 1 };

/* The time recorded for a slot (0 when none was). */
uint64_t fc_board_get(uint64_t key, int which);
/* Record a time for a slot; false when the board is full or unusable (the
 * time is lost: said once on stderr). */
bool fc_board_put(uint64_t key, int which, uint64_t t);

/* A resource several processes of the host share (a NIC), busy for `busy`
 * from `ready` on or from the first time after it that the resource is free
 * that long: returns when the use starts. The resource keeps a calendar of
 * its uses, so a use asked for late (in real time) but early in modelled
 * time fills the gap before later ones, as on the hardware, whatever order
 * the emulation's threads run in. */
uint64_t fc_board_reserve(uint64_t key, uint64_t ready, uint64_t busy);

#endif
