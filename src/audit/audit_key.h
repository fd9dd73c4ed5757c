/* audit_key.h — the audit's producer keys (audit.c): the table's hash and
 * the comparison.
 */
#ifndef ACEMQ_AUDIT_KEY_H
#define ACEMQ_AUDIT_KEY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "audit/audit_shard.h"
/* Inlined: the check hashes every id's producer, and a call into the shared
 * library costs about as much as hashing one. */
#define XXH_INLINE_ALL
#include <xxhash.h>

/* The table's hash, the shard's and the memory of evictions' (ghosts.c). It
 * decides only where to look: the key is compared. */
static inline uint64_t key_hash(const void *k, size_t n)
{
    return XXH3_64bits(k, n);
}

/* p holds this key. */
static inline int same_key(const entry *p, const void *key, size_t len)
{
    return p->key_len == len && memcmp(p->key, key, len) == 0;
}

#endif
