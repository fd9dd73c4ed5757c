/* short_bytes.h — comparing and copying short byte strings (the memory
 * store's ids) inline.
 *
 * From a shared library memcmp and memcpy are calls through the PLT, dearer
 * than the work for the 8 to 24 bytes most ids have (numeric keys,
 * "order-00000042", UUIDs in binary), and a claim plus a confirm made three
 * of them. Such strings are read as two or three overlapping 8-byte words,
 * which cover every byte and read none outside; other lengths go to libc.
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
    if (n < 8 || n > 24) return memcmp(a, b, n) == 0;
    uint64_t d =
        (acemq__load8(a) ^ acemq__load8(b)) | (acemq__load8(a + n - 8) ^ acemq__load8(b + n - 8));
    if (n > 16) d |= acemq__load8(a + 8) ^ acemq__load8(b + 8);
    return d == 0;
}

/* Copies n bytes from src to dst (not overlapping), writing no byte of dst
 * past n. */
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
