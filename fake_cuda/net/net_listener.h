/* Listening sockets shared by listen comms (net_listener.c), and what a
 * connector says first on every connection (net_connect.c sends it). */
#ifndef NCCLSIM_NET_LISTENER_H
#define NCCLSIM_NET_LISTENER_H

#include <netinet/in.h>
#include <stdint.h>

#include "net_types.h"

#define FCN_HANDLE_MAGIC 0x6e63636c73696d31ull /* "ncclsim1" */

/* The first bytes on a connection: which listen comm it is for. */
typedef struct fcn_hello {
    uint64_t magic;
    uint64_t key;
} fcn_hello;

typedef struct fcn_listener fcn_listener;

/* Non-blocking (progress never waits), close-on-exec, no Nagle delay:
 * NCCL's messages are latency-bound steps. 0, or -1 with errno. */
int fcn_tune_socket(int fd);

/* The listening socket of this thread's listen comms on dev (made by the
 * first), now also the one of the comm `key`; its address in *addr. NULL
 * (warned) when no socket could be made. */
fcn_listener *fcn_listener_join(int dev, uint64_t key, struct sockaddr_in *addr);
/* Takes new connections and their hellos; *fd: a connection for `key`, or -1. */
ncclResult_t fcn_listener_take(fcn_listener *s, uint64_t key, int *fd);
/* The comm `key` is closed: its connections not taken are dropped, and the
 * socket is closed with its last comm. */
void fcn_listener_leave(fcn_listener *s, uint64_t key);

#endif
