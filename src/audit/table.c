/* table.c — the message audit's producer table (open addressing, linear
 * probing, no tombstones) and its recency order (stamps or a list); see
 * audit_shard.h for both. */
#include <stdlib.h>

#include "audit/audit_shard.h"
#include "core/dlist.h"

static size_t table_spread(size_t producers)
{
    return producers < 256 ? 32 : producers < 4096 ? 4 : 2;
}

int acemq__audit_table_init(shard *s)
{
    size_t n = 16;
    s->slots = calloc(n, sizeof *s->slots);
    if (!s->slots) return ACEMQ_ENOMEM;
    s->mask = n - 1;
    return 0;
}

/* Frees a producer's one allocation, which begins ring_pad bytes before it. */
void acemq__audit_entry_free(size_t ring_pad, entry *p)
{
    if (p) free((unsigned char *)p - ring_pad);
}

void acemq__audit_table_destroy(shard *s, int stamped, size_t ring_pad)
{
    if (stamped) {
        for (size_t i = 0; i < s->count; i++)
            acemq__audit_entry_free(ring_pad, s->dense[i].p);
    } else {
        for (entry *p = s->head, *next; p; p = next) {
            next = p->next;
            acemq__audit_entry_free(ring_pad, p);
        }
    }
    free(s->dense);
    free(s->slots);
    s->dense = NULL;
    s->slots = NULL;
    s->head = s->tail = NULL;
    s->count = 0;
}

void acemq__audit_table_put(slot *slots, size_t mask, entry *p)
{
    size_t i = (size_t)p->hash & mask;
    while (slots[i].p)
        i = (i + 1) & mask;
    slots[i].p = p;
}

/* Room for one more producer (none when it replaces an evicted one, adding
 * 0): doubles the slots when the table would pass its fill limit, and the
 * room in dense[] for stamp recency. ACEMQ_ENOMEM leaves the table as it
 * was. */
int acemq__audit_table_reserve(shard *s, int stamped, size_t adding)
{
    if (stamped && s->count + adding > s->dense_cap) {
        size_t cap = s->dense_cap ? s->dense_cap * 2 : 16;
        slot *dense = realloc(s->dense, cap * sizeof *dense);
        if (!dense) return ACEMQ_ENOMEM;
        s->dense = dense;
        s->dense_cap = cap;
    }
    size_t n = s->mask + 1, want = (s->count + adding) * table_spread(s->count + adding);
    if (want <= n) return 0;
    size_t m = n;
    while (m < want)
        m *= 2;
    slot *slots = calloc(m, sizeof *slots);
    if (!slots) return ACEMQ_ENOMEM;
    if (stamped) {
        for (size_t i = 0; i < s->count; i++)
            acemq__audit_table_put(slots, m - 1, s->dense[i].p);
    } else {
        for (entry *p = s->head; p; p = p->next)
            acemq__audit_table_put(slots, m - 1, p);
    }
    free(s->slots);
    s->slots = slots;
    s->mask = m - 1;
    return 0;
}

/* Takes p's slot out, shifting the rest of its run back so that every
 * producer stays reachable from its home slot without tombstones. */
void acemq__audit_table_remove(shard *s, const entry *p)
{
    size_t mask = s->mask, i = (size_t)p->hash & mask;
    while (s->slots[i].p != p)
        i = (i + 1) & mask;
    for (size_t j = i;;) {
        j = (j + 1) & mask;
        if (!s->slots[j].p) break;
        size_t home = (size_t)s->slots[j].p->hash & mask;
        /* The producer at j may fill the hole at i unless its home lies
         * cyclically in (i, j]: then it must stay at or after its home. */
        int stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (stays) continue;
        s->slots[i].p = s->slots[j].p;
        i = j;
    }
    s->slots[i].p = NULL;
}

/* Adds p, just admitted, as the most recent producer. The room in dense[]
 * was made by table_reserve. */
void acemq__audit_recency_add(int stamped, shard *s, entry *p)
{
    if (!stamped) {
        ACEMQ__DLIST_PUSH_FRONT(s->head, s->tail, p);
        return;
    }
    p->index = s->count;
    s->dense[s->count].p = p;
    p->stamp = ++s->clock;
    s->other_stamps++;
}

/* Takes the least recently used producer out of the recency order. */
entry *acemq__audit_recency_pop_oldest(int stamped, shard *s)
{
    if (!stamped) {
        entry *p = s->tail;
        ACEMQ__DLIST_REMOVE(s->head, s->tail, p);
        return p;
    }
    size_t oldest = 0;
    for (size_t i = 1; i < s->count; i++)
        if (s->dense[i].p->stamp < s->dense[oldest].p->stamp) oldest = i;
    entry *p = s->dense[oldest].p, *last = s->dense[s->count - 1].p;
    s->dense[oldest].p = last;
    last->index = oldest;
    return p;
}
