/* tag_group.h — up to sixteen tags of the memory store's table read at once.
 *
 * A lookup in the memory store walks tags, one byte a slot, from the id's
 * home slot to the first empty one (linear probing). Near the table's load
 * bound that walk is long: about 20 to 30 slots at 7/8 for an id the table
 * does not hold, a byte and a branch each, and the branch that ends the
 * walk is one the processor mostly guesses wrong. Read a group at a time, a
 * walk is one or two groups: two masks, one of the empty slots and one of
 * the slots whose tag matches, answer for the whole group without a branch.
 *
 * Groups are the aligned sixteen-byte blocks of the tag array, so a read
 * never spans two cache lines (a lookup in a big table waits for its home
 * slot's line from memory, and an unaligned read would wait for the next
 * line too about a quarter of the time), and a table of a multiple of
 * sixteen slots ends on a group's end, so a walk wraps from one group to
 * the next without a read that runs past it. The first group of a walk
 * starts at its home slot: the slots before it in the block are left out.
 *
 * The SSE2 form is the one x86-64 always has; the scalar form is the one
 * other machines use, and the unit test holds the two to the same answers.
 */
#ifndef ACEMQ_BACKENDS_MEMORY_TAG_GROUP_H
#define ACEMQ_BACKENDS_MEMORY_TAG_GROUP_H

#include <stddef.h>
#include <stdint.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define ACEMQ__TAG_GROUP 16

/* Bit k of `empty` is set when slot i + k is empty, bit k of `match` when
 * its tag is the one asked for, for the slots from i to the end of i's
 * group; higher bits are 0. */
typedef struct acemq__tag_masks {
    unsigned empty, match;
} acemq__tag_masks;

/* The first slot of the group after i's. */
static inline size_t acemq__tag_group_next(size_t i)
{
    return (i | (ACEMQ__TAG_GROUP - 1)) + 1;
}

/* tags must be aligned to 16 bytes and hold i's whole group. */
static inline acemq__tag_masks acemq__tag_group_scalar(const uint8_t *tags, size_t i, uint8_t tag)
{
    acemq__tag_masks m = {0, 0};
    size_t end = acemq__tag_group_next(i);
    for (unsigned k = 0; i + k < end; k++) {
        m.empty |= (unsigned)(tags[i + k] == 0) << k;
        m.match |= (unsigned)(tags[i + k] == tag) << k;
    }
    return m;
}

#if defined(__SSE2__)
static inline acemq__tag_masks acemq__tag_group_sse2(const uint8_t *tags, size_t i, uint8_t tag)
{
    size_t first = i & ~(size_t)(ACEMQ__TAG_GROUP - 1);
    unsigned skip = (unsigned)(i - first);
    __m128i g = _mm_load_si128((const __m128i *)(const void *)(tags + first));
    acemq__tag_masks m;
    m.empty = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(g, _mm_setzero_si128())) >> skip;
    m.match = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(g, _mm_set1_epi8((char)tag))) >> skip;
    return m;
}
#define acemq__tag_group acemq__tag_group_sse2
#else
#define acemq__tag_group acemq__tag_group_scalar
#endif

#endif
