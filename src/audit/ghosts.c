/* ghosts.c — the hashes of evicted producers (or audits), so that one coming
 * back is answered UNKNOWN instead of silently starting over as NEW.
 *
 * Only 8 bytes per remembered eviction, direct-mapped by hash: O(1) and
 * bounded, at the price that a later eviction landing in the same slot
 * overwrites an earlier one. The caller counts those as `forgotten`.
 */
#include <stdlib.h>

#include "audit/audit_internal.h"

int acemq__ghosts_init(acemq__ghosts *g, size_t capacity)
{
    size_t n = acemq__pow2(capacity < 1 ? 1 : capacity);
    g->slots = calloc(n, sizeof *g->slots);
    if (!g->slots) return ACEMQ_ENOMEM;
    g->mask = n - 1;
    return 0;
}

void acemq__ghosts_destroy(acemq__ghosts *g)
{
    free(g->slots);
    g->slots = NULL;
}

static uint64_t stored(uint64_t hash)
{
    return hash ? hash : 1;
}

int acemq__ghosts_put(acemq__ghosts *g, uint64_t hash)
{
    uint64_t *s = &g->slots[hash & g->mask];
    uint64_t v = stored(hash);
    int overwrote = *s != 0 && *s != v;
    *s = v;
    return overwrote;
}

int acemq__ghosts_take(acemq__ghosts *g, uint64_t hash)
{
    uint64_t *s = &g->slots[hash & g->mask];
    if (*s != stored(hash)) return 0;
    *s = 0;
    return 1;
}
