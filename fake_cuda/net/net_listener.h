/* Listening sockets shared by listen comms (net_listener.c), and what a
 * connector says first on every connection (net_connect.c sends it). */
#ifndef NCCLSIM_NET_LISTENER_H
#define NCCLSIM_NET_LISTENER_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/un.h>

#include "net_types.h"

#define FCN_HANDLE_MAGIC 0x6e63636c73696d31ull /* "ncclsim1" */

/* The first bytes on a connection: which listen comm it is for. */
typedef struct fcn_hello {
    uint64_t magic;
    uint64_t key;
} fcn_hello;

typedef struct fcn_listener fcn_listener;

/* The abstract name of a listener's Unix socket, with its terminating 0. */
#define FCN_LOCAL_NAME_MAX 32

/* Non-blocking (progress never waits), close-on-exec, and for TCP no Nagle
 * delay: NCCL's messages are latency-bound steps. 0, or -1 with errno. */
int fcn_tune_socket(int fd, bool tcp);
/* The address of the Unix socket named `name`; returns its length. */
socklen_t fcn_local_address(const char *name, struct sockaddr_un *a);

/* The listening sockets of this thread's listen comms on dev (made by the
 * first), now also those of the comm `key`: the TCP one's address in *addr,
 * the Unix one's name in local ("" when it has none). NULL (warned) when
 * no socket could be made. */
fcn_listener *fcn_listener_join(int dev, uint64_t key, struct sockaddr_in *addr, char local[FCN_LOCAL_NAME_MAX]);
/* Takes new connections and their hellos; *fd: a connection for `key`, or -1. */
ncclResult_t fcn_listener_take(fcn_listener *s, uint64_t key, int *fd);
/* The comm `key` is closed: its connections not taken are dropped, and the
 * socket is closed with its last comm. */
void fcn_listener_leave(fcn_listener *s, uint64_t key);

#endif
