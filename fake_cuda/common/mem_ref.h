/* A reference to bytes of simulated memory that another process of the
 * machine can read, through /proc/<pid>/fd (driver/memory_refs.c makes and
 * follows them): what a step of NCCL's protocol, or a network message,
 * carries instead of a copy. */
#ifndef NCCLSIM_COMMON_MEM_REF_H
#define NCCLSIM_COMMON_MEM_REF_H

#include <stdint.h>

typedef struct fc_mem_ref {
    int32_t pid, fd;        /* a process, and its descriptor of the file that backs the bytes;
                             * fd -1: zeros no file backs (driver/zero_source.c), at offset */
    uint64_t ino, offset;   /* that file's inode; where the bytes start in it */
    int32_t local_pid;      /* the writer of the reference, where they are at addr */
    uint64_t addr;
} fc_mem_ref;

#endif
