/* test_tag_group.c — the memory store's reads of up to sixteen tags at once
 * (tag_group.h): the form this machine uses and the portable one give the
 * masks a byte-by-byte walk sees, from every slot of tables of several
 * sizes, up to the end of the slot's aligned group and not past it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "backends/memory/tag_group.h"

/* What the masks must be: slot by slot, from i to its group's end. */
static acemq__tag_masks walk(const uint8_t *tags, size_t i, uint8_t tag)
{
    acemq__tag_masks m = {0, 0};
    for (unsigned k = 0; (i + k) % ACEMQ__TAG_GROUP != 0 || k == 0; k++) {
        if (tags[i + k] == 0) m.empty |= 1u << k;
        if (tags[i + k] == tag) m.match |= 1u << k;
    }
    return m;
}

/* Tables of several multiples of sixteen slots, filled at several
 * densities with tags from a small alphabet (so matches are common), read
 * from every slot. The array is exactly cap bytes, aligned to sixteen as
 * the group reads need (the store's arena aligns to 64), so a read past the
 * last group would be caught under ASan. */
static void both_forms_match_a_walk_from_every_slot(void **state)
{
    (void)state;
    static const size_t caps[] = {16, 64, 1152, 1344};
    unsigned seed = 12345;
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        size_t cap = caps[c];
        uint8_t *tags = aligned_alloc(16, cap);
        assert_non_null(tags);
        for (unsigned percent_full = 0; percent_full <= 100; percent_full += 25) {
            for (size_t i = 0; i < cap; i++) {
                seed = seed * 1103515245u + 12345u;
                unsigned r = (seed >> 16) & 0x7FFF;
                tags[i] = r % 100 < percent_full ? (uint8_t)(0x80u | (r % 3)) : 0;
            }
            for (size_t i = 0; i < cap; i++) {
                for (uint8_t tag = 0x80; tag <= 0x83; tag++) {
                    acemq__tag_masks want = walk(tags, i, tag);
                    acemq__tag_masks scalar = acemq__tag_group_scalar(tags, i, tag);
                    acemq__tag_masks used = acemq__tag_group(tags, i, tag);
                    assert_int_equal(scalar.empty, want.empty);
                    assert_int_equal(scalar.match, want.match);
                    assert_int_equal(used.empty, want.empty);
                    assert_int_equal(used.match, want.match);
                }
            }
        }
        free(tags);
    }
}

/* The group after a slot's starts at the next multiple of sixteen. */
static void the_next_group_starts_on_a_multiple_of_sixteen(void **state)
{
    (void)state;
    assert_int_equal(acemq__tag_group_next(0), 16);
    assert_int_equal(acemq__tag_group_next(15), 16);
    assert_int_equal(acemq__tag_group_next(16), 32);
    assert_int_equal(acemq__tag_group_next(1151), 1152);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(both_forms_match_a_walk_from_every_slot),
        cmocka_unit_test(the_next_group_starts_on_a_multiple_of_sixteen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
