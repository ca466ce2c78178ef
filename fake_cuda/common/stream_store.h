/* Copies that bypass the cache, for data the copying thread does not read
 * again soon (a step for another GPU, the user's output buffer). A cached
 * store first reads the destination's line from memory: a copy then moves
 * three bytes for each byte copied, a streaming (non-temporal) one two. On a
 * 2-core AMD EPYC virtual machine, copying 128 MiB in pieces of 32 KiB to
 * 512 KiB ran at 6.4-7.8 GB/s with memcpy and 11.5-12.2 GB/s streaming.
 * Small copies stay cached: their reader (the next step, often on the same
 * core) finds them there. */
#ifndef NCCLSIM_DEVICE_STREAM_STORE_H
#define NCCLSIM_DEVICE_STREAM_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* From this many bytes a copy's destination is unlikely to be read from the
 * cache anyway (the L1 data cache of the machine above is 32 KiB per core). */
#define FC_STREAM_MIN_BYTES ((size_t)32 << 10)

/* memmove(dst, src, n), with streaming stores where the ranges do not
 * overlap; they are weakly ordered: fc_stream_fence before publishing. */
static inline void fc_stream_store(void *dst, const void *src, size_t n)
{
    char *d = dst;
    const char *s = src;
#ifdef __SSE2__
    if (d + n <= s || s + n <= d) {
        size_t head = (16 - (uintptr_t)d % 16) % 16;
        if (head > n) head = n;
        memcpy(d, s, head);
        d += head;
        s += head;
        n -= head;
        size_t body = n & ~(size_t)63;
        for (size_t i = 0; i < body; i += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
            __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 32));
            __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 48));
            _mm_stream_si128((__m128i *)(void *)(d + i), a);
            _mm_stream_si128((__m128i *)(void *)(d + i + 16), b);
            _mm_stream_si128((__m128i *)(void *)(d + i + 32), c);
            _mm_stream_si128((__m128i *)(void *)(d + i + 48), e);
        }
        memcpy(d + body, s + body, n - body);
        return;
    }
#endif
    memmove(d, s, n);
}

/* Streaming stores before it are visible before any store after it. */
static inline void fc_stream_fence(void)
{
#ifdef __SSE2__
    _mm_sfence();
#endif
}

/* A copy another thread reads next: streamed when `streaming` (the caller's
 * choice for the whole transfer: FC_STREAM_MIN_BYTES or more; then
 * fc_stream_fence before publishing), else cached. */
static inline void fc_copy_for_reader(void *dst, const void *src, size_t n, bool streaming)
{
    if (streaming) fc_stream_store(dst, src, n);
    else memmove(dst, src, n);
}

#endif
