/* id_split4.h — the common id's split (acemq__audit_split_fast, id_parse.h)
 * for four text ids at once, in AVX2 registers, for the batch check
 * (audit.c, check_many_split4). Compiled for AVX2 whatever the build's
 * target, and called only where the processor has it
 * (acemq__audit_split4_supported).
 *
 * Why: the scalar split is about a quarter of a batch's instructions per id
 * (six 64-bit constants, the digit test, the ':' search, three
 * multiplications). Here four ids share each instruction and the constants
 * stay in vector registers, out of the way of the general ones the hash and
 * the window need; and since the split reads only the ids, the batch runs
 * it one group ahead, so nothing waits for it.
 *
 * It takes an id when its last eight bytes are ':' and one to seven digits
 * after at least one producer byte, and answers exactly as the byte loop
 * would; the scalar split takes a subset of these (its digit test can flag
 * a digit falsely, never miss a non-digit), so the two never disagree on an
 * id both take. Any other id sends the whole group of four to the one-id
 * path, which answers it in full.
 */
#ifndef ACEMQ_AUDIT_ID_SPLIT4_H
#define ACEMQ_AUDIT_ID_SPLIT4_H

#if defined(__x86_64__) && defined(__GNUC__)
#define ACEMQ__AUDIT_SPLIT4 1
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "acemq/audit.h"

/* 1 with producer_len[g] and sequence[g] set for g = 0..3 when every one of
 * the four ids is a common one (above); 0 otherwise, with nothing set. No
 * id is read unless all four are non-NULL and 9..ACEMQ_AUDIT_ID_MAX bytes
 * long, and then only its last eight bytes. */
static inline __attribute__((always_inline, target("avx2"))) int
acemq__audit_split4(const char *const *ids, const size_t *id_lens, size_t *producer_len,
                    uint64_t *sequence)
{
    const __m256i zero = _mm256_setzero_si256();
    __m256i lens = _mm256_loadu_si256((const __m256i *)(const void *)id_lens);
    __m256i ptrs = _mm256_loadu_si256((const __m256i *)(const void *)ids);
    /* len - 9 in 0..ACEMQ_AUDIT_ID_MAX - 9, as signed numbers: a length
     * below 9, or one of 2^63 and more, is negative or too large. */
    __m256i rel = _mm256_sub_epi64(lens, _mm256_set1_epi64x(9));
    __m256i refused =
        _mm256_or_si256(_mm256_cmpgt_epi64(rel, _mm256_set1_epi64x(ACEMQ_AUDIT_ID_MAX - 9)),
                        _mm256_cmpgt_epi64(zero, rel));
    refused = _mm256_or_si256(refused, _mm256_cmpeq_epi64(ptrs, zero));
    if (_mm256_movemask_pd(_mm256_castsi256_pd(refused)) != 0) return 0;

    /* The last eight bytes of each, into one register lane by lane (four
     * stores and one wide load would wait for the stores to drain). */
    uint64_t last[4];
    for (int g = 0; g < 4; g++)
        memcpy(&last[g], ids[g] + id_lens[g] - 8, 8);
    __m256i w = _mm256_set_epi64x((long long)last[3], (long long)last[2], (long long)last[1],
                                  (long long)last[0]);

    /* x: each byte minus '0', a digit's value where it is one. */
    __m256i x = _mm256_sub_epi8(w, _mm256_set1_epi8('0'));
    __m256i digit = _mm256_cmpeq_epi8(_mm256_min_epu8(x, _mm256_set1_epi8(9)), x);
    /* A flag (0x80) on each byte that is no digit, then on every byte at or
     * below the highest such byte: the producer's side of the last ':'. */
    __m256i not_digit = _mm256_andnot_si256(digit, _mm256_set1_epi8((char)0x80));
    __m256i below = _mm256_or_si256(not_digit, _mm256_srli_epi64(not_digit, 8));
    below = _mm256_or_si256(below, _mm256_srli_epi64(below, 16));
    below = _mm256_or_si256(below, _mm256_srli_epi64(below, 32));
    /* The highest non-digit byte alone, which must be a ':'; and the last
     * byte must be a digit (no flag in the word's top bit). */
    __m256i highest = _mm256_andnot_si256(_mm256_srli_epi64(below, 8), below);
    __m256i colon = _mm256_cmpeq_epi8(w, _mm256_set1_epi8(':'));
    __m256i no_colon = _mm256_cmpeq_epi64(_mm256_and_si256(highest, colon), zero);
    if ((_mm256_movemask_pd(_mm256_castsi256_pd(no_colon)) |
         _mm256_movemask_pd(_mm256_castsi256_pd(not_digit))) != 0)
        return 0;

    /* The ':' is byte (flags in `below`) - 1 of the eight, so the producer
     * is len - 8 + that = rel + flags bytes long. */
    __m256i flags = _mm256_sad_epu8(_mm256_srli_epi64(below, 7), zero);
    _mm256_storeu_si256((__m256i *)(void *)producer_len, _mm256_add_epi64(rel, flags));

    /* The digits, the bytes above the ':', as one eight-digit number with
     * leading zeros (byte 7 the units): pairs, then fours, then the two
     * halves of each id's word. */
    __m256i digits = _mm256_and_si256(x, _mm256_cmpeq_epi8(below, zero));
    __m256i pairs = _mm256_maddubs_epi16(digits, _mm256_set1_epi16(0x010A));
    __m256i fours = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x00010064));
    __m256i value = _mm256_add_epi64(_mm256_mul_epu32(fours, _mm256_set1_epi64x(10000)),
                                     _mm256_srli_epi64(fours, 32));
    _mm256_storeu_si256((__m256i *)(void *)sequence, value);
    return 1;
}
#endif
#endif
