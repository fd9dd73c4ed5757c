/* test_short_bytes.c — the inline comparison and copy of short byte strings
 * (src/core/short_bytes.h: the memory store's ids, the audit's producer
 * keys), for every length on both sides of the word paths (8 bytes and up,
 * 8 to 24 for the copy) and a difference at every position. The store only
 * compares ids whose hashes are equal, so its own tests cannot reach a
 * false "equal" here; these can. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "core/short_bytes.h"

enum { LONGEST = 40, GUARD = 16 };

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((size_t)seed * 31u + i * 7u + 1u);
}

static void equal_only_when_every_byte_is(void **state)
{
    (void)state;
    unsigned char a[LONGEST], b[LONGEST];
    for (size_t n = 1; n <= LONGEST; n++) {
        fill(a, n, (unsigned)n);
        memcpy(b, a, n);
        assert_true(acemq__same_bytes(a, b, n));
        for (size_t k = 0; k < n; k++) {
            b[k] ^= 0x20;
            assert_false(acemq__same_bytes(a, b, n));
            assert_false(acemq__same_bytes(b, a, n));
            b[k] ^= 0x20;
        }
        /* NUL and high bytes are bytes like the others. */
        a[n - 1] = 0;
        b[n - 1] = 0x80;
        assert_false(acemq__same_bytes(a, b, n));
    }
}

static void copy_writes_exactly_n_bytes(void **state)
{
    (void)state;
    unsigned char src[LONGEST], dst[LONGEST + GUARD];
    for (size_t n = 1; n <= LONGEST; n++) {
        fill(src, n, (unsigned)(n + 100));
        memset(dst, 0xA5, sizeof dst);
        acemq__copy_bytes(dst, src, n);
        assert_memory_equal(dst, src, n);
        for (size_t i = n; i < sizeof dst; i++)
            assert_int_equal(dst[i], 0xA5);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(equal_only_when_every_byte_is),
        cmocka_unit_test(copy_writes_exactly_n_bytes),
    };
    return cmocka_run_group_tests_name("short bytes", tests, NULL, NULL);
}
