/* audit_key.h — the audit's producer keys (audit.c): their length classes,
 * the table's hash and the comparison, inline and straight-line for the
 * lengths the check path takes.
 */
#ifndef ACEMQ_AUDIT_KEY_H
#define ACEMQ_AUDIT_KEY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "audit/audit_internal.h"
/* Inlined: producers are short, and the call into the shared library costs
 * more than hashing them. */
#define XXH_INLINE_ALL
#include <xxhash.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Multiplies to 128 bits and folds the halves: every bit of both inputs
 * reaches the middle of the product (wyhash's mix). */
static inline uint64_t fold_mul(uint64_t a, uint64_t b)
{
#if defined(__SIZEOF_INT128__)
    __uint128_t m = (__uint128_t)a * b;
    return (uint64_t)m ^ (uint64_t)(m >> 64);
#else
    /* Four 32-bit products, as compilers without a 128-bit type would. */
    uint64_t lo_lo = (a & 0xFFFFFFFFu) * (b & 0xFFFFFFFFu);
    uint64_t hi_lo = (a >> 32) * (b & 0xFFFFFFFFu);
    uint64_t lo_hi = (a & 0xFFFFFFFFu) * (b >> 32);
    uint64_t hi_hi = (a >> 32) * (b >> 32);
    uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xFFFFFFFFu) + lo_hi;
    uint64_t high = (hi_lo >> 32) + (cross >> 32) + hi_hi;
    return ((cross << 32) | (lo_lo & 0xFFFFFFFFu)) ^ high;
#endif
}

/* The table's hash. Producers of 9 to 32 bytes (the common ActiveMQ shape
 * is 30 or so) are read as two or four overlapping words, which cover every
 * byte, and mixed with one multiplication: well under half of what XXH3
 * spends on them, and the lookup compares the same bytes again. Other
 * lengths take XXH3. A key always has one length, hence one function: the
 * hash is a function of the key. The hash decides nothing but where to look
 * (the key is compared), and the shard; the memory of evictions keys on
 * XXH3 (ghost_hash), unchanged. */
#define K0 0xa0761d6478bd642full
#define K1 0xe7037ed1a0b428dbull

/* Length classes: the check path tests a producer's length once and runs a
 * copy of the lookup made for its class, in which hash and comparison are
 * straight-line code. */
enum { KEY_ANY, KEY_9_16, KEY_17_32 };

static inline __attribute__((always_inline)) uint64_t key_hash_in(int cls, const unsigned char *k,
                                                                  size_t n)
{
    uint64_t h;
    if (cls == KEY_9_16)
        h = fold_mul(acemq__load8(k) ^ K0, acemq__load8(k + n - 8) ^ K1 ^ n);
    else if (cls == KEY_17_32)
        /* The four words folded to two by xor, then one multiplication: a
         * byte lies in one word, or in two that land in different halves
         * (bytes 8-15 of w1 overlapping the start of w2), or at different
         * lanes of one half, so no single changed byte cancels out. */
        h = fold_mul(acemq__load8(k) ^ acemq__load8(k + n - 16) ^ K0,
                     acemq__load8(k + 8) ^ acemq__load8(k + n - 8) ^ K1 ^ n);
    else
        h = XXH3_64bits(k, n);
    return h;
}

static inline int key_class(size_t n)
{
    return n - 17 <= 15 ? KEY_17_32 : n - 9 <= 7 ? KEY_9_16 : KEY_ANY;
}

static inline __attribute__((always_inline)) uint64_t key_hash(const unsigned char *k, size_t n)
{
    int cls = key_class(n);
    if (cls == KEY_17_32) return key_hash_in(KEY_17_32, k, n);
    if (cls == KEY_9_16) return key_hash_in(KEY_9_16, k, n);
    return key_hash_in(KEY_ANY, k, n);
}

static inline uint64_t ghost_hash(const void *k, size_t n)
{
    return XXH3_64bits(k, n);
}

/* Keys are short: compared a word at a time, inline, with no byte loop for
 * 8 bytes or more (the last word overlaps the one before), and with no
 * branch at all in the 9-16 and 17-32 byte classes. */
static inline __attribute__((always_inline)) int same_key(int cls, const unsigned char *a,
                                                          const unsigned char *b, size_t n)
{
    if (cls == KEY_9_16)
        return ((acemq__load8(a) ^ acemq__load8(b)) |
                (acemq__load8(a + n - 8) ^ acemq__load8(b + n - 8))) == 0;
    if (cls == KEY_17_32) {
#if defined(__SSE2__)
        /* Two overlapping 16-byte compares (SSE2 is part of x86-64, so no
         * guard): the key's bytes stay in vector registers, which leaves
         * the general ones to the hash and the window, where four words
         * compared as integers had the check save and restore six
         * callee-saved registers per call. */
        __m128i e0 = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)a),
                                    _mm_loadu_si128((const __m128i *)(const void *)b));
        __m128i e1 = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(a + n - 16)),
                                    _mm_loadu_si128((const __m128i *)(const void *)(b + n - 16)));
        return _mm_movemask_epi8(_mm_and_si128(e0, e1)) == 0xFFFF;
#else
        return ((acemq__load8(a) ^ acemq__load8(b)) | (acemq__load8(a + 8) ^ acemq__load8(b + 8)) |
                (acemq__load8(a + n - 16) ^ acemq__load8(b + n - 16)) |
                (acemq__load8(a + n - 8) ^ acemq__load8(b + n - 8))) == 0;
#endif
    }
    return acemq__same_bytes(a, b, n); /* the other classes: a word at a time */
}

#endif
