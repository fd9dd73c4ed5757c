/* id_parse.h — splitting "<producer>:<sequence>" at the last ':', inline so
 * that the check path (audit.c) pays no call for it; id.c wraps it for the API.
 *
 * The common id ends in a sequence of at most seven digits. On little-endian
 * machines its last eight bytes are read as one word: one pass of bit
 * arithmetic finds the ':' and converts the digits, without a loop whose trip
 * count the branch predictor would have to guess per id
 * (acemq__audit_split_fast). Every other id (and
 * every malformed one) takes the byte loop, which also words the errors.
 * The word pays its way on ActiveMQ ids: with the byte loop alone, the text
 * check of a broker stream takes about a tenth longer.
 */
#ifndef ACEMQ_AUDIT_ID_PARSE_H
#define ACEMQ_AUDIT_ID_PARSE_H

#include <string.h>
#include "acemq/audit.h"

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ACEMQ__AUDIT_SWAR 1
#endif

static inline int acemq__audit_id_fail(acemq_audit_id *out, const char *why)
{
    out->error = why;
    return ACEMQ_EINVAL;
}

/* The byte loop: any id, every error. */
static inline int acemq__audit_split_slow(const char *id, size_t id_len, acemq_audit_id *out)
{
    if (!id || id_len == 0) return acemq__audit_id_fail(out, "id is empty");
    if (id_len > ACEMQ_AUDIT_ID_MAX)
        return acemq__audit_id_fail(out, "id is longer than ACEMQ_AUDIT_ID_MAX (1024) bytes");
    size_t colon = id_len;
    while (colon > 0 && id[colon - 1] != ':')
        colon--;
    if (colon == 0) return acemq__audit_id_fail(out, "id has no ':' between producer and sequence");
    if (colon == 1) return acemq__audit_id_fail(out, "producer (before the last ':') is empty");
    if (colon == id_len) return acemq__audit_id_fail(out, "sequence (after the last ':') is empty");
    /* Nineteen digits cannot overflow 64 bits; only a longer number pays for
     * the overflow check. */
    uint64_t v = 0;
    size_t i = colon;
    for (size_t easy = colon + (id_len - colon < 19 ? id_len - colon : 19); i < easy; i++) {
        unsigned d = (unsigned)(unsigned char)id[i] - '0';
        if (d > 9)
            return acemq__audit_id_fail(out,
                                        "sequence (after the last ':') is not a decimal number");
        v = v * 10 + d;
    }
    for (; i < id_len; i++) {
        unsigned d = (unsigned)(unsigned char)id[i] - '0';
        if (d > 9)
            return acemq__audit_id_fail(out,
                                        "sequence (after the last ':') is not a decimal number");
        if (v > (UINT64_MAX - d) / 10)
            return acemq__audit_id_fail(out, "sequence (after the last ':') is above 2^64 - 1");
        v = v * 10 + d;
    }
    out->producer = id;
    out->producer_len = colon - 1;
    out->sequence = v;
    return 0;
}

#ifdef ACEMQ__AUDIT_SWAR
/* The common id, whose last eight bytes are ':' and one to seven digits
 * after at least one producer byte: 1 with *producer_len and *sequence set;
 * 0 for every other id, which the byte loop then takes (and words the
 * errors of). One pass over one word, no loop: x = w ^ '0' turns a digit
 * into its value 0..9; a byte is no digit when x + 0x76 reaches its top
 * bit (x >= 10) or x has that bit already. A byte of x >= 0x8a also carries
 * into the byte above, which can only flag that byte falsely, never hide a
 * flag: the highest flag is then on a digit, not the ':' required, and the
 * id goes to the byte loop. The highest flagged byte must be the ':'; the
 * digits above it, the rest shifted out, are summed in three
 * multiplications (eight digits, leading zeros). */
static inline int acemq__audit_split_fast(const char *id, size_t id_len, size_t *producer_len,
                                          uint64_t *sequence)
{
    /* 9..ACEMQ_AUDIT_ID_MAX bytes in one unsigned comparison (id_len - 9
     * wraps below 9), then the pointer: two branches, where the three
     * tests written apart were compiled into flags combined by hand. */
    if (id_len - 9 > (size_t)ACEMQ_AUDIT_ID_MAX - 9) return 0;
    if (!id) return 0;
    uint64_t w;
    memcpy(&w, id + id_len - 8, 8);
    uint64_t x = w ^ 0x3030303030303030u;
    uint64_t nd = ((x + 0x7676767676767676u) | x) & 0x8080808080808080u;
    if (nd == 0) return 0;
    unsigned pos = (unsigned)(63 - __builtin_clzll(nd)) >> 3; /* last non-digit */
    if (pos >= 7 || ((w >> (8 * pos)) & 0xFF) != ':') return 0;
    unsigned shift = 8 * pos + 8; /* at most 56 */
    uint64_t v = (x >> shift) << shift;
    v = v * 10 + (v >> 8);
    v = ((v & 0x000000FF000000FFu) * (100 + (1000000ull << 32)) +
         ((v >> 16) & 0x000000FF000000FFu) * (1 + (10000ull << 32))) >>
        32;
    *producer_len = id_len - 8 + pos;
    *sequence = (uint32_t)v;
    return 1;
}
#endif

/* 0 with *out filled, or ACEMQ_EINVAL with out->error set; out->producer is
 * NULL on error. */
static inline int acemq__audit_split(const char *id, size_t id_len, acemq_audit_id *out)
{
    out->producer = NULL;
    out->producer_len = 0;
    out->sequence = 0;
    out->error = NULL;
#ifdef ACEMQ__AUDIT_SWAR
    if (acemq__audit_split_fast(id, id_len, &out->producer_len, &out->sequence)) {
        out->producer = id;
        return 0;
    }
#endif
    return acemq__audit_split_slow(id, id_len, out);
}

#endif
