/* Open addressing over a table that processes of a host share (the time
 * board, the delivery board): entries of `entry_size` bytes, each starting
 * with its key (0: empty), claimed by the first process to insert the key.
 * A table may give entries back (the delivery board, whose keys name
 * buffers of communicators that come and go): a given-back entry is claimed
 * again by a later insert, and lookups go on past it. Such a table must
 * have one inserter per key (two could claim two entries). Header only:
 * each library links its own copy. */
#ifndef NCCLSIM_COMMON_KEY_TABLE_H
#define NCCLSIM_COMMON_KEY_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FC_KEY_TABLE_GIVEN_BACK UINT64_MAX /* no key: an entry to claim again */

/* The entry of `key` among the 2^bits of `table`, claimed when `insert`;
 * NULL when the key is 0, absent, or finds no room within `probes` entries. */
static inline void *fc_key_table_find(void *table, size_t entry_size, unsigned bits, unsigned probes, uint64_t key,
                                      bool insert)
{
    if (!table || !key || key == FC_KEY_TABLE_GIVEN_BACK) return NULL;
    uint64_t h = (key * 0x9e3779b97f4a7c15ull) >> (64 - bits); /* the product's high bits mix every bit of the key */
    uint64_t mask = ((uint64_t)1 << bits) - 1;
    for (unsigned attempt = 0; attempt < probes; attempt++) { /* again when another key took a given-back entry */
        uint64_t *given_back = NULL; /* the first on the way: claimed if the key is not further on */
        for (unsigned i = 0; i < probes; i++) {
            uint64_t *at = (uint64_t *)(void *)((char *)table + ((h + i) & mask) * entry_size);
            uint64_t k = __atomic_load_n(at, __ATOMIC_ACQUIRE);
            if (k == key) return at;
            if (k == FC_KEY_TABLE_GIVEN_BACK) {
                if (!given_back) given_back = at;
            } else if (k == 0) {
                if (!insert) return NULL;
                if (given_back) break;
                uint64_t zero = 0;
                if (__atomic_compare_exchange_n(at, &zero, key, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
                    zero == key)
                    return at;
            }
        }
        if (!insert || !given_back) return NULL;
        uint64_t was = FC_KEY_TABLE_GIVEN_BACK;
        if (__atomic_compare_exchange_n(given_back, &was, key, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return given_back;
    }
    return NULL;
}

/* Give an entry found above back (its owner, once it holds nothing a reader
 * may take for current). */
static inline void fc_key_table_give_back(void *entry)
{
    __atomic_store_n((uint64_t *)entry, FC_KEY_TABLE_GIVEN_BACK, __ATOMIC_RELEASE);
}

#endif
