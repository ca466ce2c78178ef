/* Mixing 64-bit words into a hash (a multiply and a shift per word): for
 * checks that tell a record written on purpose from leftover bytes, and for
 * names made of several fields. Not for anything that must resist an
 * adversary. */
#ifndef NCCLSIM_COMMON_HASH_MIX_H
#define NCCLSIM_COMMON_HASH_MIX_H

#include <stddef.h>
#include <stdint.h>

#define FC_HASH_SEED 0x9e3779b97f4a7c15ull

static inline uint64_t fc_hash_mix(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= 0xff51afd7ed558ccdull;
    return h ^ h >> 33;
}

/* The hash of n words, starting from FC_HASH_SEED ^ first. */
static inline uint64_t fc_hash_words(uint64_t first, const uint64_t *words, size_t n)
{
    uint64_t h = FC_HASH_SEED ^ first;
    for (size_t i = 0; i < n; i++) h = fc_hash_mix(h, words[i]);
    return h;
}

#endif
