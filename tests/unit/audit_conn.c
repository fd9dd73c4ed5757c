/* audit_conn.c — the connection audit: one audit per queue shared by its
 * consumers, one per consumer on a topic, audits kept in an LRU, the
 * check_for_duplicates switch, and bad arguments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "acemq/acemq.h"
#include "audit_fixture.h"

static acemq_conn_audit *make_conn(uint32_t max_audits, int check, unsigned flags)
{
    acemq_conn_audit_options o;
    acemq_conn_audit_options_init(&o);
    assert_int_equal(o.max_audits, 1000);
    assert_int_equal(o.check_for_duplicates, 1);
    o.max_audits = max_audits;
    o.check_for_duplicates = check;
    o.audit.policy = ACEMQ_AUDIT_FAIL_CLOSED;
    o.audit.flags = flags;
    acemq_conn_audit *c = NULL;
    assert_int_equal(acemq_conn_audit_new(&c, &o), 0);
    return c;
}

static int ccheck(acemq_conn_audit *c, int kind, const char *dest, const char *consumer,
                  const char *id, int *cause)
{
    return acemq_conn_audit_check(c, kind, dest, consumer, id, strlen(id), cause);
}

/* A queue's consumers share one audit: a message is handled once per queue. */
void queue_audit_is_shared(void **state)
{
    (void)state;
    for (int f = 0; f < 2; f++) {
        acemq_conn_audit *c = make_conn(1000, 1, f ? ACEMQ_AUDIT_THREAD_SAFE : 0);
        const int Q = ACEMQ_AUDIT_QUEUE;
        assert_int_equal(ccheck(c, Q, "orders", "c1", "p:1", NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(ccheck(c, Q, "orders", "c2", "p:1", NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(ccheck(c, Q, "orders", NULL, "p:1", NULL), ACEMQ_AUDIT_DUPLICATE);
        assert_int_equal(ccheck(c, Q, "invoices", "c1", "p:1", NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(acemq_conn_audit_rollback(c, Q, "orders", "c2", "p:1", 3), 1);
        assert_int_equal(ccheck(c, Q, "orders", "c1", "p:1", NULL), ACEMQ_AUDIT_NEW);
        assert_int_equal(acemq_conn_audit_rollback(c, Q, "nowhere", NULL, "p:1", 3), 0);
        acemq_audit_stats s;
        uint64_t audits = 0;
        assert_int_equal(acemq_conn_audit_stats_get(c, &s, &audits), 0);
        assert_true(audits == 2);
        assert_true(s.checks == 5);
        assert_true(s.duplicates == 2);
        assert_true(s.rollbacks == 1);
        acemq_conn_audit_free(c);
    }
}

/* Each topic subscriber gets every message once: one audit per consumer. */
void topic_audit_is_per_consumer(void **state)
{
    (void)state;
    acemq_conn_audit *c = make_conn(1000, 1, 0);
    const int T = ACEMQ_AUDIT_TOPIC;
    assert_int_equal(ccheck(c, T, "prices", "c1", "p:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, T, "prices", "c2", "p:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, T, "prices", "c1", "p:1", NULL), ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(ccheck(c, T, "prices", "c2", "p:1", NULL), ACEMQ_AUDIT_DUPLICATE);
    /* A consumer's audit covers all it subscribes to (wildcards included). */
    assert_int_equal(ccheck(c, T, "other", "c1", "p:1", NULL), ACEMQ_AUDIT_DUPLICATE);
    /* A queue and a consumer of the same name are different audits. */
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_QUEUE, "c1", NULL, "p:1", NULL), ACEMQ_AUDIT_NEW);
    uint64_t audits = 0;
    acemq_audit_stats s;
    assert_int_equal(acemq_conn_audit_stats_get(c, &s, &audits), 0);
    assert_true(audits == 3);
    acemq_conn_audit_free(c);
}

/* Audits are kept in an LRU; one dropped takes its history with it. */
void audit_lru_evicts_whole_audits(void **state)
{
    (void)state;
    acemq_conn_audit *c = make_conn(2, 1, 0);
    const int Q = ACEMQ_AUDIT_QUEUE;
    int cause;
    assert_int_equal(ccheck(c, Q, "q1", NULL, "a:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, Q, "q1", NULL, "b:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, Q, "q2", NULL, "a:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, Q, "q3", NULL, "a:1", NULL), ACEMQ_AUDIT_NEW); /* drops q1 */
    acemq_audit_stats s;
    uint64_t audits = 0;
    assert_int_equal(acemq_conn_audit_stats_get(c, &s, &audits), 0);
    assert_true(audits == 2);
    assert_true(s.evictions == 2); /* q1's two producers */
    assert_true(s.producers == 2);
    assert_true(s.checks == 4);
    /* q1 again: every producer's first id is UNKNOWN, later ones as usual. */
    assert_int_equal(ccheck(c, Q, "q1", NULL, "a:1", &cause), ACEMQ_AUDIT_UNKNOWN);
    assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
    assert_int_equal(ccheck(c, Q, "q1", NULL, "a:1", NULL), ACEMQ_AUDIT_DUPLICATE);
    assert_int_equal(ccheck(c, Q, "q1", NULL, "a:2", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, Q, "q1", NULL, "c:9", &cause), ACEMQ_AUDIT_UNKNOWN);
    assert_int_equal(cause, ACEMQ_AUDIT_EVICTED);
    assert_int_equal(acemq_conn_audit_stats_get(c, &s, NULL), 0);
    assert_true(s.unknown_evicted == 2);
    acemq_conn_audit_free(c);
}

void check_for_duplicates_switch(void **state)
{
    (void)state;
    acemq_conn_audit *c = make_conn(1000, 0, 0);
    const int Q = ACEMQ_AUDIT_QUEUE;
    assert_int_equal(ccheck(c, Q, "q", NULL, "p:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, Q, "q", NULL, "p:1", NULL), ACEMQ_AUDIT_NEW);
    acemq_conn_audit_set_check_for_duplicates(c, 1);
    assert_int_equal(ccheck(c, Q, "q", NULL, "p:1", NULL), ACEMQ_AUDIT_NEW);
    assert_int_equal(ccheck(c, Q, "q", NULL, "p:1", NULL), ACEMQ_AUDIT_DUPLICATE);
    acemq_conn_audit_set_check_for_duplicates(c, 0);
    assert_int_equal(ccheck(c, Q, "q", NULL, "p:1", NULL), ACEMQ_AUDIT_NEW);
    acemq_audit_stats s;
    assert_int_equal(acemq_conn_audit_stats_get(c, &s, NULL), 0);
    assert_true(s.checks == 2);
    acemq_conn_audit_set_check_for_duplicates(NULL, 1);
    acemq_conn_audit_free(c);
    acemq_conn_audit_free(NULL);
}

void conn_audit_errors(void **state)
{
    (void)state;
    acemq_conn_audit *c = make_conn(1000, 1, 0);
    assert_int_equal(ccheck(c, 7, "q", "c", "p:1", NULL), ACEMQ_EINVAL);
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_QUEUE, NULL, "c", "p:1", NULL), ACEMQ_EINVAL);
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_TOPIC, "t", NULL, "p:1", NULL), ACEMQ_EINVAL);
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_QUEUE, "", NULL, "p:1", NULL), ACEMQ_EINVAL);
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_QUEUE, "q", NULL, "p1", NULL), ACEMQ_EINVAL);
    char *big = malloc(ACEMQ_AUDIT_NAME_MAX + 2);
    assert_non_null(big);
    memset(big, 'n', ACEMQ_AUDIT_NAME_MAX + 1);
    big[ACEMQ_AUDIT_NAME_MAX + 1] = '\0';
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_QUEUE, big, NULL, "p:1", NULL), ACEMQ_EINVAL);
    big[ACEMQ_AUDIT_NAME_MAX] = '\0';
    assert_int_equal(ccheck(c, ACEMQ_AUDIT_QUEUE, big, NULL, "p:1", NULL), ACEMQ_AUDIT_NEW);
    free(big);
    assert_int_equal(ccheck(NULL, ACEMQ_AUDIT_QUEUE, "q", NULL, "p:1", NULL), ACEMQ_EINVAL);
    assert_int_equal(acemq_conn_audit_stats_get(c, NULL, NULL), ACEMQ_EINVAL);
    acemq_conn_audit_free(c);

    acemq_conn_audit_options o;
    acemq_conn_audit_options_init(&o);
    o.max_audits = 0;
    assert_int_equal(acemq_conn_audit_new(&c, &o), ACEMQ_EINVAL);
    assert_null(c);
    acemq_conn_audit_options_init(&o);
    o.audit.depth = 0;
    assert_int_equal(acemq_conn_audit_new(&c, &o), ACEMQ_EINVAL);
    assert_int_equal(acemq_conn_audit_new(&c, NULL), 0);
    acemq_conn_audit_free(c);
}
