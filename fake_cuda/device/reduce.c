/* NCCL's reduction operators on the CPU; see reduce.h.
 *
 * What the device does, per type (reduce_kernel.h, sm_90):
 *  - integers: unsigned arithmetic that wraps (signed kernels are the
 *    unsigned ones), MinMax compares (x ^ mask) unsigned;
 *  - f32: IEEE single without flush to zero; a NaN result is the GPU's one
 *    quiet NaN, 0x7fffffff. f64: IEEE double (NaN payloads as the host makes them);
 *  - f16, bf16: __hadd/__hmul, one rounding to nearest even of the exact
 *    result. Computing in float and rounding once more gives the same value
 *    (float has at least 2p+2 bits for both), so that is what is done here.
 *    NaN results are canonical (0x7fff);
 *  - fp8: converted to half, computed in half, converted back with
 *    __NV_SATFINITE: overflow *and infinity* become the largest finite value,
 *    NaN becomes 0x7f;
 *  - MinMax on floats (fminf/fmaxf, __hmin/__hmax): a NaN loses to a number,
 *    two NaNs give the canonical NaN, and -0 < +0.
 *
 * Elements go through blocks of BLK (a last block of at most SMALL elements
 * through one of SMALL): the loops over them have a fixed trip count and no
 * aliasing, which GCC vectorises at -O2, and a dst equal to a
 * source is read before it is written. The accumulator is a local buffer;
 * the other sources are read where they are when a whole block is there
 * and aligned for its type (a copy first is one more pass over each source
 * through the cache), else through a local buffer too. */
#include "reduce.h"

#include <pthread.h>
#include <string.h>

#include "stream_store.h"

enum { BLK = 512, SMALL = 16 }; /* SMALL: a last block of at most this many elements */

typedef union __attribute__((may_alias)) { /* also read in place from any buffer */
    uint8_t u8[BLK];
    uint16_t u16[BLK];
    uint32_t u32[BLK];
    uint64_t u64[BLK];
    float f32[BLK];
    double f64[BLK];
} block;

/* The operator's argument decoded once per call. */
typedef struct {
    int type, redop;
    uint64_t mask;   /* MinMax integers: xor mask; PreMulSum integers: scalar */
    bool is_min;     /* MinMax floats */
    float fscalar;   /* PreMulSum f32, f16, bf16, fp8 (their value, exact in float) */
    uint8_t f8premul[256]; /* PreMulSum fp8: every value times the scalar */
    double dscalar;  /* PreMulSum f64 */
    uint32_t divisor;
    bool is_signed;  /* SumPostDiv */
} params;

static const uint8_t type_size[FC_NCCL_NUM_TYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

size_t fc_nccl_type_size(int type) {
    return type >= 0 && type < FC_NCCL_NUM_TYPES ? type_size[type] : 0;
}

static bool is_int(int type) { return type >= FC_NCCL_TYPE_i8 && type <= FC_NCCL_TYPE_u64; }

/* ncclDevWorkColl keeps divisor:31, isSigned:1 */
static uint32_t postdiv_divisor(uint64_t arg) { return (uint32_t)(arg >> 1) & 0x7fffffffu; }

bool fc_redop_of_host(int type, int hostOp, fc_redop *out) {
    size_t size = fc_nccl_type_size(type);
    if (!size || hostOp < 0 || hostOp > 3) return false;
    *out = (fc_redop){.type = type, .redop = hostOp < 2 ? hostOp : FC_NCCL_REDOP_MinMax};
    if (hostOp < 2) return true;
    bool max = hostOp == 2; /* ncclMax, then ncclMin */
    uint64_t all = ~0ull >> (64 - 8 * size), sign = all ^ (all >> 1);
    bool is_signed = type == FC_NCCL_TYPE_i8 || type == FC_NCCL_TYPE_i32 || type == FC_NCCL_TYPE_i64;
    out->arg = (is_signed ? sign : 0) ^ (max ? all : 0);
    return true;
}

bool fc_redop_valid(const fc_redop *op) {
    if (!op || !fc_nccl_type_size(op->type) || op->redop < 0 || op->redop >= FC_NCCL_NUM_REDOPS)
        return false;
    if (op->redop == FC_NCCL_REDOP_SumPostDiv)
        return is_int(op->type) && postdiv_divisor(op->arg) != 0;
    return true;
}

/* ---- bits and conversions ---- */

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

#define CANON_F32 0x7fffffffu
#define CANON_16 0x7fffu
#define CANON_F8 0x7fu

/* v >> sh rounded to nearest even, 1 <= sh <= 31 */
static inline uint32_t rne_shift(uint32_t v, uint32_t sh) {
    uint32_t q = v >> sh, rem = v & ((1u << sh) - 1), half = 1u << (sh - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

/* The bits of a float below the smallest normal of a format whose exponent
 * field starts at 2^(1-bias) and has mbits of mantissa: its subnormal count. */
static inline uint32_t sub_count(uint32_t a, int bias, int mbits) {
    /* the value is m*2^(e-150); the unit is 2^(1-bias-mbits) */
    int e = (int)(a >> 23), sh = 151 - bias - mbits - e;
    return rne_shift((a & 0x7fffffu) | 0x800000u, (uint32_t)(sh > 31 ? 31 : sh));
}

/* c ? x : y without a branch, so that the loops calling it vectorise */
static inline uint32_t sel(bool c, uint32_t x, uint32_t y) {
    uint32_t m = -(uint32_t)c;
    return (x & m) | (y & ~m);
}

static inline float h2f(uint16_t h) {
    uint32_t em = h & 0x7fffu, s = (uint32_t)(h & 0x8000u) << 16;
    uint32_t sub = f2u((float)(int32_t)em * 0x1p-24f); /* no subnormal operand: immune to DAZ */
    uint32_t nrm = (em << 13) + ((127u - 15u) << 23);
    uint32_t spc = (em << 13) | 0x7f800000u; /* inf, NaN with its payload */
    return u2f(sel(em < 0x400u, sub, sel(em < 0x7c00u, nrm, spc)) | s);
}

/* Round to half, nearest even, overflow to inf; NaN -> canonical. */
static inline uint16_t f2h(float f) {
    uint32_t x = f2u(f), a = x & 0x7fffffffu, s = (x >> 16) & 0x8000u;
    uint32_t v = a - ((127u - 15u) << 23), nrm = (v + 0xfffu + ((v >> 13) & 1)) >> 13;
    /* below 2^-14: adding 0.5 (ulp 2^-24) rounds to the subnormal grid; tiny
     * inputs flushed by DAZ would round to 0 anyway */
    uint32_t sub = f2u(u2f(a) + 0.5f) - f2u(0.5f);
    uint32_t fin = s | sel(a >= 0x477ff000u /* 65520 */, 0x7c00u, sel(a >= 0x38800000u, nrm, sub));
    return (uint16_t)sel(a > 0x7f800000u, CANON_16, fin);
}

static inline float bf2f(uint16_t b) { return u2f((uint32_t)b << 16); }

static inline uint16_t f2bf(float f) {
    uint32_t x = f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return CANON_16;
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16); /* carries into the exponent */
}

static inline float e4m3_to_f(uint8_t c) {
    uint32_t em = c & 0x7fu, s = (uint32_t)(c & 0x80u) << 24;
    if (em == 0x7fu) return u2f(CANON_F32);
    uint32_t r = em < 8 ? f2u((float)em * 0x1p-9f) : (em << 20) + ((127u - 7u) << 23);
    return u2f(r | s);
}

/* e5m2 is the top byte of a half */
static inline float e5m2_to_f(uint8_t c) { return h2f((uint16_t)(c << 8)); }

/* __nv_cvt_halfraw_to_fp8(h, __NV_SATFINITE, ...) for h given as a float:
 * nearest even, beyond the largest finite (inf included) -> largest finite. */
static inline uint8_t f2fp8(float f, bool e4m3) {
    uint32_t x = f2u(f), a = x & 0x7fffffffu;
    uint8_t s = (uint8_t)((x >> 24) & 0x80u);
    int bias = e4m3 ? 7 : 15, mbits = e4m3 ? 3 : 2;
    if (a > 0x7f800000u) return CANON_F8;
    if (a >= (e4m3 ? 0x43e00000u /* 448 */ : 0x47600000u /* 57344 */))
        return s | (e4m3 ? 0x7eu : 0x7bu);
    if (a >= (uint32_t)(128 - bias) << 23)
        return (uint8_t)(s | rne_shift(a - ((uint32_t)(127 - bias) << 23), (uint32_t)(23 - mbits)));
    return (uint8_t)(s | sub_count(a, bias, mbits));
}

/* An fp8 operation's result: rounded to half by the half instruction, then
 * to fp8 by the satfinite conversion. */
static inline uint8_t fp8_result(float r, bool e4m3) { return f2fp8(h2f(f2h(r)), e4m3); }

static inline float fp8_to_f(uint8_t c, bool e4m3) { return e4m3 ? e4m3_to_f(c) : e5m2_to_f(c); }

/* Float MinMax on bits: NaN loses, two NaNs -> canonical, else the total order
 * of sign-magnitude (-0 < +0), via keys that compare as unsigned integers.
 * maxmag: the largest magnitude that is not a NaN. */
#define FLOAT_MINMAX(U, x, y, signbit, maxmag, canon, is_min)                                      \
    do {                                                                                           \
        const U sb_ = (U)(signbit);                                                                \
        for (int i = 0; i < cnt; i++) {                                                            \
            U a_ = x[i], b_ = y[i];                                                                \
            bool an_ = (U)(a_ & (U)~sb_) > (U)(maxmag), bn_ = (U)(b_ & (U)~sb_) > (U)(maxmag);     \
            U ka_ = (a_ & sb_) ? (U)~a_ : (U)(a_ | sb_);                                           \
            U kb_ = (b_ & sb_) ? (U)~b_ : (U)(b_ | sb_);                                           \
            U pick_ = ((ka_ < kb_) == (is_min)) ? a_ : b_;                                         \
            x[i] = an_ ? (bn_ ? (U)(canon) : b_) : bn_ ? a_ : pick_;                               \
        }                                                                                          \
    } while (0)

/* ---- per-block operations ---- */

/* Over the first cnt elements; cnt is BLK or SMALL in each inlined copy, a
 * constant there, as GCC's vectoriser at -O2 needs. */
#define LOOP(body) for (int i = 0; i < cnt; i++) { body; }
#define PER_BLOCK static inline __attribute__((always_inline)) void

#define INT_REDUCE(U, arr)                                                                         \
    do {                                                                                           \
        U *x = a->arr;                                                                             \
        const U *y = b->arr;                                                                       \
        if (p->redop == FC_NCCL_REDOP_Prod) LOOP(x[i] = (U)(x[i] * y[i]))                          \
        else if (p->redop == FC_NCCL_REDOP_MinMax) {                                               \
            const U m = (U)p->mask;                                                                \
            LOOP(x[i] = (U)(x[i] ^ m) < (U)(y[i] ^ m) ? x[i] : y[i])                               \
        } else LOOP(x[i] = (U)(x[i] + y[i])) /* Sum, PreMulSum, SumPostDiv */                      \
    } while (0)

/* 16-bit floats: TO/FROM convert to and from float */
#define F16_REDUCE(TO, FROM, maxmag)                                                               \
    do {                                                                                           \
        uint16_t *x = a->u16;                                                                      \
        const uint16_t *y = b->u16;                                                                \
        if (p->redop == FC_NCCL_REDOP_Prod) LOOP(x[i] = FROM(TO(x[i]) * TO(y[i])))                 \
        else if (p->redop == FC_NCCL_REDOP_MinMax)                                                 \
            FLOAT_MINMAX(uint16_t, x, y, 0x8000u, maxmag, CANON_16, p->is_min);                    \
        else LOOP(x[i] = FROM(TO(x[i]) + TO(y[i])))                                                \
    } while (0)

/* fp8 sum and product by table, [e5m2][prod][a << 8 | b]: computing them
 * element by element through half is ten times slower. */
static uint8_t f8_table[2][2][1 << 16];
static pthread_once_t f8_once = PTHREAD_ONCE_INIT;

static void f8_build(void) {
    for (int k = 0; k < 2; k++)
        for (uint32_t ab = 0; ab < 1u << 16; ab++) {
            float x = fp8_to_f((uint8_t)(ab >> 8), k == 0), y = fp8_to_f((uint8_t)ab, k == 0);
            f8_table[k][0][ab] = fp8_result(x + y, k == 0);
            f8_table[k][1][ab] = fp8_result(x * y, k == 0);
        }
}

PER_BLOCK reduce_f8(const params *p, block *restrict a, const block *restrict b, bool e4m3, int cnt) {
    uint8_t *x = a->u8;
    const uint8_t *y = b->u8;
    if (p->redop == FC_NCCL_REDOP_MinMax) {
        /* the half min/max returns an input unchanged, the conversion back is exact
         * except that it saturates e5m2's infinities */
        if (e4m3) {
            FLOAT_MINMAX(uint8_t, x, y, 0x80u, 0x7eu, CANON_F8, p->is_min);
        } else {
            FLOAT_MINMAX(uint8_t, x, y, 0x80u, 0x7cu, CANON_F8, p->is_min);
            LOOP(if ((x[i] & 0x7fu) == 0x7cu) x[i] = (uint8_t)((x[i] & 0x80u) | 0x7bu))
        }
        return;
    }
    pthread_once(&f8_once, f8_build);
    const uint8_t *t = f8_table[!e4m3][p->redop == FC_NCCL_REDOP_Prod];
    LOOP(x[i] = t[x[i] << 8 | y[i]])
}

static inline float canon_f32(float r) { return r != r ? u2f(CANON_F32) : r; }

/* a[i] = op(a[i], b[i]): a holds what is reduced so far, b the next source */
PER_BLOCK reduce_elems(const params *p, block *restrict a, const block *restrict b, int cnt) {
    switch (p->type) {
    case FC_NCCL_TYPE_i8: case FC_NCCL_TYPE_u8: INT_REDUCE(uint8_t, u8); break;
    case FC_NCCL_TYPE_i32: case FC_NCCL_TYPE_u32: INT_REDUCE(uint32_t, u32); break;
    case FC_NCCL_TYPE_i64: case FC_NCCL_TYPE_u64: INT_REDUCE(uint64_t, u64); break;
    case FC_NCCL_TYPE_f16: F16_REDUCE(h2f, f2h, 0x7c00u); break;
    case FC_NCCL_TYPE_bf16: F16_REDUCE(bf2f, f2bf, 0x7f80u); break;
    case FC_NCCL_TYPE_f8e4m3: reduce_f8(p, a, b, true, cnt); break;
    case FC_NCCL_TYPE_f8e5m2: reduce_f8(p, a, b, false, cnt); break;
    case FC_NCCL_TYPE_f32: {
        float *x = a->f32;
        const float *y = b->f32;
        if (p->redop == FC_NCCL_REDOP_Prod) LOOP(x[i] = canon_f32(x[i] * y[i]))
        else if (p->redop == FC_NCCL_REDOP_MinMax)
            FLOAT_MINMAX(uint32_t, a->u32, b->u32, 0x80000000u, 0x7f800000u, CANON_F32, p->is_min);
        else LOOP(x[i] = canon_f32(x[i] + y[i]))
        break;
    }
    case FC_NCCL_TYPE_f64: {
        double *x = a->f64;
        const double *y = b->f64;
        if (p->redop == FC_NCCL_REDOP_Prod) LOOP(x[i] = x[i] * y[i])
        else if (p->redop == FC_NCCL_REDOP_MinMax)
            FLOAT_MINMAX(uint64_t, a->u64, b->u64, 0x8000000000000000u, 0x7ff0000000000000u,
                         0x7fffffffffffffffu, p->is_min);
        else LOOP(x[i] = x[i] + y[i])
        break;
    }
    }
}

/* PreMulSum's preOp: multiply by the scalar */
PER_BLOCK premul_elems(const params *p, block *a, int cnt) {
    const float s = p->fscalar;
    switch (p->type) {
    case FC_NCCL_TYPE_i8: case FC_NCCL_TYPE_u8: LOOP(a->u8[i] = (uint8_t)(a->u8[i] * p->mask))
        break;
    case FC_NCCL_TYPE_i32: case FC_NCCL_TYPE_u32: LOOP(a->u32[i] *= (uint32_t)p->mask) break;
    case FC_NCCL_TYPE_i64: case FC_NCCL_TYPE_u64: LOOP(a->u64[i] *= p->mask) break;
    case FC_NCCL_TYPE_f16: LOOP(a->u16[i] = f2h(h2f(a->u16[i]) * s)) break;
    case FC_NCCL_TYPE_bf16: LOOP(a->u16[i] = f2bf(bf2f(a->u16[i]) * s)) break;
    case FC_NCCL_TYPE_f8e4m3: case FC_NCCL_TYPE_f8e5m2: LOOP(a->u8[i] = p->f8premul[a->u8[i]])
        break;
    case FC_NCCL_TYPE_f32: LOOP(a->f32[i] = canon_f32(a->f32[i] * s)) break;
    case FC_NCCL_TYPE_f64: LOOP(a->f64[i] *= p->dscalar) break;
    }
}

/* SumPostDiv's postOp (ncclAvg on integers): the magnitude divided, rounded
 * toward zero (NCCL's reciprocal multiply plus fix-up is exact), sign restored. */
#define INT_POSTDIV(U, arr, W, signbit)                                                            \
    LOOP({                                                                                         \
        U v_ = a->arr[i];                                                                          \
        bool neg_ = p->is_signed && (v_ & (U)(signbit));                                           \
        W q_ = (W)(neg_ ? (U)-v_ : v_) / d;                                                        \
        a->arr[i] = neg_ ? (U)-(U)q_ : (U)q_;                                                      \
    })

PER_BLOCK postdiv_elems(const params *p, block *a, int cnt) {
    const uint32_t d = p->divisor;
    switch (p->type) {
    case FC_NCCL_TYPE_i8: case FC_NCCL_TYPE_u8: INT_POSTDIV(uint8_t, u8, uint32_t, 0x80u); break;
    case FC_NCCL_TYPE_i32: case FC_NCCL_TYPE_u32:
        INT_POSTDIV(uint32_t, u32, uint32_t, 0x80000000u);
        break;
    case FC_NCCL_TYPE_i64: case FC_NCCL_TYPE_u64:
        INT_POSTDIV(uint64_t, u64, uint64_t, 0x8000000000000000u);
        break;
    }
}

/* Each block operation in two copies: a whole block, and a small last one
 * (an 8-byte AllReduce reduced 512 elements). */
static void reduce_block(const params *p, block *restrict a, const block *restrict b, bool small) {
    if (small) reduce_elems(p, a, b, SMALL);
    else reduce_elems(p, a, b, BLK);
}
static void premul_block(const params *p, block *a, bool small) {
    if (small) premul_elems(p, a, SMALL);
    else premul_elems(p, a, BLK);
}
static void postdiv_block(const params *p, block *a, bool small) {
    if (small) postdiv_elems(p, a, SMALL);
    else postdiv_elems(p, a, BLK);
}

static void init_params(params *p, const fc_redop *op, bool pre) {
    memset(p, 0, sizeof *p);
    p->type = op->type;
    p->redop = op->redop;
    p->mask = op->arg;
    p->is_min = (op->arg & 1) == 0;
    p->divisor = postdiv_divisor(op->arg);
    p->is_signed = op->arg & 1;
    switch (op->type) { /* PreMulSum's scalar: the element type in the low bytes */
    case FC_NCCL_TYPE_f16: p->fscalar = h2f((uint16_t)op->arg); break;
    case FC_NCCL_TYPE_bf16: p->fscalar = bf2f((uint16_t)op->arg); break;
    case FC_NCCL_TYPE_f8e4m3: p->fscalar = e4m3_to_f((uint8_t)op->arg); break;
    case FC_NCCL_TYPE_f8e5m2: p->fscalar = e5m2_to_f((uint8_t)op->arg); break;
    case FC_NCCL_TYPE_f32: p->fscalar = u2f((uint32_t)op->arg); break;
    case FC_NCCL_TYPE_f64: memcpy(&p->dscalar, &op->arg, 8); break;
    }
    bool e4m3 = op->type == FC_NCCL_TYPE_f8e4m3;
    if (pre && (e4m3 || op->type == FC_NCCL_TYPE_f8e5m2))
        for (int c = 0; c < 256; c++)
            p->f8premul[c] = fp8_result(fp8_to_f((uint8_t)c, e4m3) * p->fscalar, e4m3);
}

/* bytes of src at off into a block; the rest of its first `used` bytes zeroed
 * so every loop can run over all of its elements */
static void load(block *b, const void *src, size_t off, size_t bytes, size_t used) {
    memcpy(b->u8, (const char *)src + off, bytes);
    if (bytes < used) memset((char *)b + bytes, 0, used - bytes);
}

/* Ask for the block read after this one (the next source's, or the first
 * source's next) while this one is reduced. A block's sources are read one
 * after the other, each a short burst, which the hardware's prefetchers
 * follow poorly: reducing 8 sources of 16 MiB from memory, 6.0-7.1 GB/s
 * read without, 8.0-9.6 GB/s with (2-core AMD EPYC virtual machine). A
 * prefetch past the end of a buffer (the last block's) is harmless. */
static inline void prefetch_block(const char *at, size_t bytes)
{
    for (size_t k = 0; k < bytes; k += 64) __builtin_prefetch(at + k);
}

static void reduce(const fc_redop *op, void *dst, const void *const *srcs, int nsrcs, size_t n, bool pre_first,
                   bool post, bool streaming)
{
    if (!fc_redop_valid(op) || nsrcs < 1) return;
    size_t size = type_size[op->type];
    bool pre = pre_first && op->redop == FC_NCCL_REDOP_PreMulSum; /* other preOps: identity */
    post = post && op->redop == FC_NCCL_REDOP_SumPostDiv;         /* other postOps: identity */
    if (nsrcs == 1 && !pre && !post) {
        if (dst != srcs[0]) fc_copy_for_reader(dst, srcs[0], n * size, streaming);
        if (streaming) fc_stream_fence();
        return;
    }
    params p;
    init_params(&p, op, pre);
    _Alignas(64) block a, b;
    for (size_t first = 0; first < n; first += BLK) {
        size_t off = first * size, bytes = (n - first < BLK ? n - first : BLK) * size;
        bool small = n - first <= SMALL;
        size_t used = (small ? SMALL : BLK) * size;
        load(&a, srcs[0], off, bytes, used);
        if (pre) premul_block(&p, &a, small);
        for (int s = 1; s < nsrcs; s++) {
            const char *at = (const char *)srcs[s] + off;
            if (s + 1 < nsrcs) prefetch_block((const char *)srcs[s + 1] + off, bytes);
            else if (n - first > BLK) prefetch_block((const char *)srcs[0] + off + bytes, bytes);
            if (n - first >= BLK && (uintptr_t)at % size == 0) { /* a whole block, aligned */
                reduce_block(&p, &a, (const block *)(const void *)at, false);
            } else {
                load(&b, srcs[s], off, bytes, used);
                reduce_block(&p, &a, &b, small);
            }
        }
        if (post) postdiv_block(&p, &a, small);
        fc_copy_for_reader((char *)dst + off, a.u8, bytes, streaming);
    }
    if (streaming) fc_stream_fence();
}

void fc_reduce(const fc_redop *op, void *dst, const void *const *srcs, int nsrcs, size_t n, bool pre_first, bool post)
{
    reduce(op, dst, srcs, nsrcs, n, pre_first, post, false);
}

void fc_reduce_streaming(const fc_redop *op, void *dst, const void *const *srcs, int nsrcs, size_t n,
                         bool pre_first, bool post)
{
    reduce(op, dst, srcs, nsrcs, n, pre_first, post, true);
}

/* multimem.ld_reduce.add of f16/bf16 with .acc::f32 (what NCCL asks for from
 * CUDA 12.2): the sum is kept in fp32 and rounded to the type once. */
static void sum16_wide(void *dst, const void *const *srcs, int nsrcs, size_t n, bool bf16)
{
    for (size_t i = 0; i < n; i++) {
        float acc = 0.0f;
        for (int s = 0; s < nsrcs; s++) {
            uint16_t v;
            memcpy(&v, (const char *)srcs[s] + 2 * i, 2);
            acc += bf16 ? bf2f(v) : h2f(v);
        }
        uint16_t r = bf16 ? f2bf(acc) : f2h(acc);
        memcpy((char *)dst + 2 * i, &r, 2);
    }
}

void fc_reduce_multimem(const fc_redop *op, void *dst, const void *const *srcs, int nsrcs, size_t n)
{
    bool sum16 = op->redop == FC_NCCL_REDOP_Sum && (op->type == FC_NCCL_TYPE_f16 || op->type == FC_NCCL_TYPE_bf16);
    if (!fc_redop_valid(op) || nsrcs < 1) return;
    if (sum16) sum16_wide(dst, srcs, nsrcs, n, op->type == FC_NCCL_TYPE_bf16);
    else fc_reduce(op, dst, srcs, nsrcs, n, false, false);
}
