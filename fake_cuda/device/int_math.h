/* Integer rounding as NCCL's device code does it (DIVUP, ALIGN_SIZE). */
#ifndef FC_DEVICE_INT_MATH_H
#define FC_DEVICE_INT_MATH_H

#include <stdint.h>

static inline int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t align_up(int64_t a, int64_t b) { return div_up(a, b) * b; }

#endif
