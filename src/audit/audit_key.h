/* audit_key.h — the audit's producer keys (audit.c): the table's hash and
 * the comparison.
 *
 * Both run on every check, on producer ids as brokers make them (ActiveMQ's
 * `ID:<host>-<port>-<ms>-<n>:<conn>:<session>:<producer>`, 40 to 80 bytes).
 * For keys of 16 to 80 bytes on x86-64 both are straight-line SSE2 code that
 * reads five 16-byte blocks whatever the length: XXH3 and memcmp branch by
 * length range, and those branches are mispredicted when producers of
 * different lengths interleave, as they do in every broker's stream; on
 * bench_audit's broker stream the text check takes about 40 % less time
 * with the straight-line pair than with XXH3 and memcmp. Keys of other
 * lengths go to the general check (audit.c), which uses XXH3 and memcmp,
 * so that the common check calls nothing; other machines use the two in
 * the common check too.
 */
#ifndef ACEMQ_AUDIT_KEY_H
#define ACEMQ_AUDIT_KEY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "audit/audit_shard.h"
/* XXH3 inlined into key_hash_short: a call into the shared library costs
 * about as much as hashing one short key. */
#define XXH_INLINE_ALL
#include <xxhash.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Out of line, so that the check that inlines key_hash stays small. */
static __attribute__((noinline)) uint64_t key_hash_short(const void *key, size_t n)
{
    return XXH3_64bits(key, n);
}

#ifdef __SSE2__
/* The start of the block that begins at `at`, or of the key's last block
 * when that would run past it: five blocks then cover every byte of a key
 * of 16 to 80 bytes, some twice, and read none past its end. */
static inline size_t key_block(size_t at, size_t last)
{
    return at < last ? at : last;
}

static inline __m128i key_load(const unsigned char *k, size_t at)
{
    return _mm_loadu_si128((const __m128i *)(const void *)(k + at));
}

/* One block's share of the hash: each 64-bit half mixed with a secret and
 * its two 32-bit halves multiplied, as XXH3 accumulates. */
static inline __m128i key_share(const unsigned char *k, size_t at, long long s1, long long s0)
{
    __m128i v = _mm_xor_si128(key_load(k, at), _mm_set_epi64x(s1, s0));
    return _mm_mul_epu32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* Keys of 16 to 80 bytes, the lengths of the straight-line code. */
static inline int key_fast_range(size_t n)
{
    return n - 16 <= 64; /* wraps below 16 */
}

/* key_hash of a key of 16 to 80 bytes. */
static inline __attribute__((always_inline)) uint64_t key_hash_fast(const void *key, size_t n)
{
    const unsigned char *k = key;
    size_t last = n - 16;
    __m128i a =
        _mm_add_epi64(key_share(k, 0, 0x3e4ba423396cfeb8, 0x1cad21f72c81017c),
                      key_share(k, key_block(16, last), 0x5b979083e96dd4de, 0x1f67b3b7a4a44072));
    __m128i b =
        _mm_add_epi64(key_share(k, key_block(32, last), 0x78e5c0cc4ee679cb, 0x2172ffcc7dd05a82),
                      key_share(k, key_block(48, last), 0x0e2443f7744608b8, 0x4c263a81e69035e0));
    __m128i acc = _mm_add_epi64(_mm_add_epi64(a, b),
                                key_share(k, last, 0x4b00c391bb52283c, 0x232e531b8b65d088));
    uint64_t lo = (uint64_t)_mm_cvtsi128_si64(acc);
    uint64_t hi = (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc));
    __uint128_t m = (__uint128_t)(lo ^ n) * (hi ^ 0x9e3779b185ebca87u);
    return (uint64_t)m ^ (uint64_t)(m >> 64);
}

/* a and b, both n bytes long (16 to 80), hold the same bytes. */
static inline int same_bytes_16_to_80(const unsigned char *a, const unsigned char *b, size_t n)
{
    size_t last = n - 16;
    __m128i eq = _mm_cmpeq_epi8(key_load(a, 0), key_load(b, 0));
    for (size_t at = 16; at <= 64; at += 16) {
        size_t i = key_block(at, last);
        eq = _mm_and_si128(eq, _mm_cmpeq_epi8(key_load(a, i), key_load(b, i)));
    }
    return _mm_movemask_epi8(eq) == 0xFFFF;
}

/* p holds this key of 16 to 80 bytes. */
static inline int same_key_fast(const entry *p, const void *key, size_t len)
{
    return p->key_len == len && same_bytes_16_to_80(p->key, key, len);
}
#else
static inline int key_fast_range(size_t n)
{
    return n - 1 < ACEMQ_AUDIT_PRODUCER_MAX; /* wraps for 0 */
}

static inline uint64_t key_hash_fast(const void *key, size_t n)
{
    return key_hash_short(key, n);
}

static inline int same_key_fast(const entry *p, const void *key, size_t len)
{
    return p->key_len == len && memcmp(p->key, key, len) == 0;
}
#endif

/* The table's hash, the shard's and the memory of evictions' (ghosts.c):
 * every byte counts, so producers that differ in one digit anywhere land
 * apart. It only decides where to look; the key is compared. */
static inline uint64_t key_hash(const void *key, size_t n)
{
    return key_fast_range(n) ? key_hash_fast(key, n) : key_hash_short(key, n);
}

/* p holds this key, of any length. */
static inline int same_key(const entry *p, const void *key, size_t len)
{
    if (key_fast_range(len)) return same_key_fast(p, key, len);
    return p->key_len == len && memcmp(p->key, key, len) == 0;
}

#endif
