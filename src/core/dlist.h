/* dlist.h — the intrusive doubly linked list that the audit's recency
 * (audit.c, lru.c) and the memory store's claim and confirm orders
 * (backends/memory/idem.c) keep: records carry their own `prev` and `next`, of their
 * own type, and a list is a head and a tail, NULL when empty.
 *
 * Macros rather than functions over an embedded link: each user's record
 * keeps its fields where its cache-line layout wants them, with their own
 * type (no container_of on the check path), and the code is the same
 * straight-line code each file had written out for itself. Arguments are
 * lvalues and are evaluated more than once: pass plain names, no calls.
 */
#ifndef ACEMQ_DLIST_H
#define ACEMQ_DLIST_H

#include <stddef.h>

/* Appends e at the tail. */
#define ACEMQ__DLIST_PUSH_BACK(head, tail, e)                                                      \
    do {                                                                                           \
        (e)->next = NULL;                                                                          \
        (e)->prev = (tail);                                                                        \
        if (tail)                                                                                  \
            (tail)->next = (e);                                                                    \
        else                                                                                       \
            (head) = (e);                                                                          \
        (tail) = (e);                                                                              \
    } while (0)

/* Puts e at the head. */
#define ACEMQ__DLIST_PUSH_FRONT(head, tail, e)                                                     \
    do {                                                                                           \
        (e)->prev = NULL;                                                                          \
        (e)->next = (head);                                                                        \
        if (head)                                                                                  \
            (head)->prev = (e);                                                                    \
        else                                                                                       \
            (tail) = (e);                                                                          \
        (head) = (e);                                                                              \
    } while (0)

/* Takes e out; its own prev and next are left as they were. */
#define ACEMQ__DLIST_REMOVE(head, tail, e)                                                         \
    do {                                                                                           \
        if ((e)->prev)                                                                             \
            (e)->prev->next = (e)->next;                                                           \
        else                                                                                       \
            (head) = (e)->next;                                                                    \
        if ((e)->next)                                                                             \
            (e)->next->prev = (e)->prev;                                                           \
        else                                                                                       \
            (tail) = (e)->prev;                                                                    \
    } while (0)

/* Moves e, which is in the list and is not its head (so it has a prev), to
 * the head: the recency update on a use. */
#define ACEMQ__DLIST_MOVE_TO_FRONT(head, tail, e)                                                  \
    do {                                                                                           \
        (e)->prev->next = (e)->next;                                                               \
        if ((e)->next)                                                                             \
            (e)->next->prev = (e)->prev;                                                           \
        else                                                                                       \
            (tail) = (e)->prev;                                                                    \
        (e)->prev = NULL;                                                                          \
        (e)->next = (head);                                                                        \
        (head)->prev = (e);                                                                        \
        (head) = (e);                                                                              \
    } while (0)

#endif
