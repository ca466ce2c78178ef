/* NCCL's reduction operators computed on the CPU, bit for bit as NCCL 2.30's
 * device code computes them (src/device/reduce_kernel.h), so that emulated
 * kernels give the results a GPU would. Types and operators are numbered as
 * in layout.h (ncclDataType_t, ncclDevRedOp_t). */
#ifndef NCCLSIM_DEVICE_REDUCE_H
#define NCCLSIM_DEVICE_REDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"

/* arg is NCCL's redOpArg (ncclDevWorkColl.redOpArg) as hostToDevRedOp built it:
 *   MinMax     integers: xor mask (sign bit for signed types, all bits for max);
 *              floats: bit 0 set for max, clear for min
 *   PreMulSum  the scalar, in the element type, in the low bytes (when
 *              redOpArgIsPtr, the element it points to: RedOpArg::loadArg)
 *   SumPostDiv (integers only) divisor << 1 | isSigned */
typedef struct {
    int type;
    int redop;
    uint64_t arg;
} fc_redop;

/* The device operator NCCL's hostToDevRedOp builds for the user's ncclSum,
 * ncclProd, ncclMax or ncclMin (ncclRedOp_t 0..3) on a type: what a net
 * plugin, which is handed the user's operator, reduces with. False for other
 * operators or an unknown type. */
bool fc_redop_of_host(int type, int hostOp, fc_redop *out);

/* Bytes per element, 0 when the type is unknown. */
size_t fc_nccl_type_size(int type);

/* Type and operator known and combinable (NCCL has SumPostDiv kernels for
 * integers only) and, for SumPostDiv, a non-zero divisor. */
bool fc_redop_valid(const fc_redop *op);

/* dst[i] = postOp(op(srcs[nsrcs-1][i], ... op(srcs[1][i], preOp(srcs[0][i])))) for
 * i < n elements. preOp (PreMulSum's multiply) applies to srcs[0] only when
 * pre_first, as NCCL applies it to data read from the user's input buffer;
 * postOp (SumPostDiv's divide) only when post. dst may be disjoint from the
 * sources or equal to any of them; buffers need no alignment. With one source
 * and no pre/post operation it is a byte copy. Does nothing when
 * !fc_redop_valid(op) or nsrcs < 1. */
void fc_reduce(const fc_redop *op, void *dst, const void *const *srcs, int nsrcs, size_t n,
               bool pre_first, bool post);

/* fc_reduce for a large result the caller does not read again soon: stored
 * past the cache (stream_store.h). */
void fc_reduce_streaming(const fc_redop *op, void *dst, const void *const *srcs, int nsrcs, size_t n,
                         bool pre_first, bool post);

/* What a multimem load-reduce (NVLS) returns for the copies srcs[0..nsrcs):
 * as fc_reduce without pre/post operations, except that f16 and bf16 sums
 * accumulate in fp32 and round once (multimem.ld_reduce ... .acc::f32). */
void fc_reduce_multimem(const fc_redop *op, void *dst, const void *const *srcs, int nsrcs, size_t n);

#endif
