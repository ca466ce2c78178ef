/* Modelled time of the network's messages (NCCLSIM_CLOCK=model; see
 * fake_cuda/common/time_board.h).
 *
 * A message leaves when its data is ready (the time the emulated kernel put
 * beside it on the host's time board) and its NIC is free: the NIC is busy
 * for the bytes at its line rate (all processes of a host share it through
 * the board); it reaches the peer a network latency later, and its buffer
 * there is ready no earlier than that and than the buffer was freed. The
 * sender's buffer is free again once the NIC has read it. */
#ifndef NCCLSIM_NET_TIME_H
#define NCCLSIM_NET_TIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

bool fcn_time_on(void);
/* A message of `size` bytes from `data` posted on NIC `dev`: when it arrives
 * at the peer, and when the NIC has read the data. */
void fcn_time_send(int dev, const void *data, size_t size, uint64_t *arrive, uint64_t *sent);
/* The send completed: its buffer is free from `sent` on. */
void fcn_time_sent(const void *data, uint64_t sent);
/* A message that arrives at `arrive` was received into `data`. */
void fcn_time_received(const void *data, uint64_t arrive);

/* CollNet (in-network reduction): a member sends `bytes` of `data` up to the
 * switch on NIC `dev` from when they are ready: when its NIC starts and ends. */
void fcn_time_upload(int dev, const void *data, size_t bytes, uint64_t *start, uint64_t *end);
/* When the switch's result (`down` bytes) has reached this member: the
 * switch reduces as the data streams in and sends the result on at once, so
 * its last byte follows the last member's last byte up (`last_end`), or this
 * member's own start (`start`) by the result's time on the link, each way's
 * latency and the switch's own. */
uint64_t fcn_time_reduced(int dev, uint64_t last_end, uint64_t start, size_t down);

#endif
