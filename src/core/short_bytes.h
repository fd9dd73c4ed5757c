/* short_bytes.h — comparing and copying short byte strings inline: the
 * memory store's ids, the message audit's producer keys.
 *
 * From a shared library memcmp and memcpy are calls through the PLT, dearer
 * than the work for the few bytes such keys have. Strings of 8 bytes or
 * more are read a word at a time, the last word overlapping the one before
 * it, so every byte is covered, none outside is read, and no byte loop (a
 * branch per byte) is left over.
 */
#ifndef ACEMQ_SHORT_BYTES_H
#define ACEMQ_SHORT_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t acemq__load8(const unsigned char *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

static inline void acemq__store8(unsigned char *p, uint64_t x)
{
    memcpy(p, &x, 8);
}

/* 1 when the n bytes at a and b are equal. */
static inline int acemq__same_bytes(const unsigned char *a, const unsigned char *b, size_t n)
{
    if (n >= 8) {
        size_t last = n - 8;
        for (size_t i = 0; i < last; i += 8)
            if (acemq__load8(a + i) != acemq__load8(b + i)) return 0;
        return acemq__load8(a + last) == acemq__load8(b + last);
    }
    for (; n > 0; n--)
        if (*a++ != *b++) return 0;
    return 1;
}

/* Copies n bytes from src to dst (not overlapping), writing no byte of dst
 * past n: 8 to 24 bytes as two or three words, other lengths by memcpy. */
static inline void acemq__copy_bytes(unsigned char *dst, const unsigned char *src, size_t n)
{
    if (n < 8 || n > 24) {
        memcpy(dst, src, n);
        return;
    }
    /* Every word is read before any is written, so the overlapping writes
     * put each byte where the source has it. */
    uint64_t first = acemq__load8(src), last = acemq__load8(src + n - 8);
    uint64_t middle = n > 16 ? acemq__load8(src + 8) : 0;
    acemq__store8(dst, first);
    if (n > 16) acemq__store8(dst + 8, middle);
    acemq__store8(dst + n - 8, last);
}

#endif
