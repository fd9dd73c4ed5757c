/* lru.c — a map from byte-string keys to fixed-size payloads, kept in least
 * recently used order: the audit table of a connection audit. (An audit's
 * producer table, whose lookup is the check path, is its own, in audit.c.)
 *
 * Chained buckets (so removal is a pointer swap) and an intrusive recency
 * list. Header, key and payload share one allocation, so a hit reads one
 * place. An evicted entry is handed back to the caller to be reused for the
 * newcomer: once the table is full, churn allocates nothing unless a key
 * outgrows the room its entry was made with (at least MIN_KEY_CAP bytes).
 */
#include <stdlib.h>
#include <string.h>

#include "audit/audit_internal.h"

/* Room for an ActiveMQ producer id ("ID:host-port-millis-n:c:s:p") and then some. */
#define MIN_KEY_CAP 64

int acemq__lru_init(acemq__lru *l, size_t expected, size_t payload_size)
{
    memset(l, 0, sizeof *l);
    /* Half full at the expected count: chains stay about one entry long. */
    size_t n = acemq__pow2(expected < 8 ? 16 : expected * 2);
    l->buckets = calloc(n, sizeof *l->buckets);
    if (!l->buckets) return ACEMQ_ENOMEM;
    l->mask = n - 1;
    l->payload_size = payload_size;
    return 0;
}

void acemq__lru_entry_free(acemq__lru_entry *e)
{
    free(e);
}

void acemq__lru_destroy(acemq__lru *l, void (*drop)(void *payload))
{
    acemq__lru_entry *e = l->head;
    while (e) {
        acemq__lru_entry *next = e->next;
        if (drop) drop(acemq__lru_payload(e));
        acemq__lru_entry_free(e);
        e = next;
    }
    free(l->buckets);
    memset(l, 0, sizeof *l);
}

acemq__lru_entry *acemq__lru_find(acemq__lru *l, uint64_t hash, const void *key, size_t len)
{
    return acemq__lru_find_fast(l, hash, key, len);
}

acemq__lru_entry *acemq__lru_pop_oldest(acemq__lru *l)
{
    acemq__lru_entry *e = l->tail;
    if (!e) return NULL;
    ACEMQ__DLIST_REMOVE(l->head, l->tail, e);
    acemq__lru_entry **p = &l->buckets[e->hash & l->mask].first;
    while (*p != e)
        p = &(*p)->chain;
    *p = e->chain;
    l->count--;
    return e;
}

acemq__lru_entry *acemq__lru_insert(acemq__lru *l, uint64_t hash, const void *key, size_t len,
                                    acemq__lru_entry *reuse)
{
    acemq__lru_entry *e = reuse;
    if (e && e->key_cap < len) {
        free(e);
        e = NULL;
    }
    if (!e) {
        size_t cap = len < MIN_KEY_CAP ? MIN_KEY_CAP : (len + 15) & ~(size_t)15;
        e = calloc(1, sizeof *e + l->payload_size + cap);
        if (!e) return NULL;
        e->key_cap = (uint32_t)cap;
    }
    memcpy(acemq__lru_key(e), key, len);
    e->key_len = (uint32_t)len;
    e->hash = hash;
    acemq__lru_entry **b = &l->buckets[hash & l->mask].first;
    e->chain = *b;
    *b = e;
    ACEMQ__DLIST_PUSH_FRONT(l->head, l->tail, e);
    l->count++;
    return e;
}
