/* Connection objects shared by net_connect.c (which creates them) and
 * net_transfer.c (which moves messages over them). */
#ifndef NCCLSIM_NET_COMM_H
#define NCCLSIM_NET_COMM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mem_ref.h"
#include "net_types.h"

/* Requests a comm can hold at once: NCCL keeps at most NCCL_STEPS (8) per
 * connection in flight and its own plugins allow 32; past this, isend/irecv
 * answer "try again" (a NULL request). */
#define FCN_MAX_REQUESTS 64

/* Frame header before every message's payload on the wire. */
#define FCN_FRAME_MAGIC 0x6e73696du /* "nsim" */
typedef struct fcn_frame {
    uint32_t magic;
    int32_t tag;
    uint64_t size;
    uint64_t arrive; /* modelled time the message reaches the peer (net_time.h); 0: untimed */
    uint64_t wire;   /* bytes that follow (form) */
    uint64_t form;   /* what they are: enum fcn_wire_form */
} fcn_frame;

enum fcn_wire_form {
    FCN_WIRE_BYTES = 0,  /* the message */
    FCN_WIRE_PACKED = 1, /* the packed runs of a message without payload (net_sparse.h) */
    /* a reference to the sender's bytes (fc_mem_ref), which the receiver
     * copies from where they are and acknowledges with one byte back; the
     * send completes then (the sender's buffer is NCCL's until that) */
    FCN_WIRE_REF = 2,
};

/* Messages from this size go as references between processes that can
 * follow them (fcn_comm.by_ref): moving a message through a socket copies
 * it twice, into the kernel and out, with TCP's work per segment besides. */
#define FCN_REF_MIN_BYTES ((size_t)64 << 10)

enum fcn_req_kind { FCN_REQ_FREE = 0, FCN_REQ_SEND, FCN_REQ_RECV, FCN_REQ_FLUSH };

typedef struct fcn_request {
    struct fcn_comm *comm;
    int kind;
    int done;
    char *data;
    size_t size;   /* send: bytes to send; recv: capacity */
    int tag;
    size_t nbytes; /* bytes actually transferred, valid when done */
    uint64_t arrive, sent; /* send: modelled arrival at the peer, and when the NIC has read the data */
} fcn_request;

enum fcn_comm_kind { FCN_SEND_COMM = 1, FCN_RECV_COMM = 2 };
enum fcn_recv_state { FCN_RX_HEADER = 0, FCN_RX_MATCH, FCN_RX_PAYLOAD };

typedef struct fcn_comm {
    uint32_t magic; /* FCN_COMM_MAGIC: catches a wrong pointer from the caller */
    int kind;
    int fd;
    int dev;
    bool local; /* fd is a Unix socket (a peer on this machine), not TCP */
    /* One thread at a time: NCCL's proxy drives a comm from one thread, but
     * nothing in the interface promises it. */
    pthread_mutex_t lock;
    ncclResult_t error; /* sticky: once the connection failed, every call fails */
    fcn_request req[FCN_MAX_REQUESTS];
    /* Posted send/recv requests not yet complete, in posting order. */
    int queue[FCN_MAX_REQUESTS];
    int nqueued;
    /* Message on the wire: the request it belongs to (an index in req[], or
     * -1) and the bytes of header + payload moved so far. */
    int wire_req;
    size_t wire_off;
    fcn_frame frame; /* header being sent or received */
    const char *wire_data; /* send: the bytes after the header (the request's, `packed` or `ref`) */
    fc_mem_ref ref;        /* a reference being sent or received */
    int by_ref;            /* send: the receiver follows references (net_memory.h) */
    int nsent;             /* send: requests at the queue's front sent as references, awaiting their acks */
    unsigned acks_owed;    /* recv: acknowledgements of references not written yet */
    char *packed;          /* a message without payload, packed (send) or as received (recv) */
    size_t packed_cap;
    int rx_state;
    uint64_t nmsgs;  /* messages completed, for logs */
    uint64_t nrefs;  /* of them, sent or received as references */
    short watched;   /* poll events a sleeping proxy waits for on fd (idle.h) */
} fcn_comm;

#define FCN_COMM_MAGIC 0x6e73636du

#endif
