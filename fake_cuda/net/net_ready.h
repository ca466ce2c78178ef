/* Which of a thread's connections have something to read (a receive's
 * message, a send's acknowledgement), one poll() per pass.
 *
 * NCCL's proxy thread passes over its operations again and again and tests
 * each pending request once per pass; a test reads the socket, and a read
 * that finds nothing is a system call all the same: with a large AllReduce
 * in flight, 80,000 a second on 2 x 8, nearly all of them empty. Here a
 * thread's pass is the run of tests between two tests of the same
 * connection; when one ends, one poll() over the connections of the pass
 * that wait for a new message says which have data, and in the next pass a
 * connection that had none is not read. A message arriving meanwhile is
 * read one pass later; nothing is lost, and a connection a pass has not
 * polled is always read. */
#ifndef NCCLSIM_NET_READY_H
#define NCCLSIM_NET_READY_H

#include <stdbool.h>

/* Before reading comm's socket (fd) for a new message or acknowledgement,
 * on the thread that tests it: false when the previous pass's poll found
 * nothing to read there. */
bool fcn_ready_may_read(const void *comm, int fd);

#endif
