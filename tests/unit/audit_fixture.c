/* audit_fixture.c — the helpers every part of test_audit shares: an audit
 * made with given options (asserted to open), a check by producer and
 * sequence or by text id, and the counters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "acemq/acemq.h"
#include "audit_fixture.h"

acemq_audit *audit_make(uint32_t depth, uint32_t producers, int policy, unsigned flags)
{
    acemq_audit_options o;
    acemq_audit_options_init(&o);
    o.depth = depth;
    o.max_producers = producers;
    o.policy = policy;
    o.flags = flags;
    acemq_audit *a = NULL;
    assert_int_equal(acemq_audit_new(&a, &o), 0);
    assert_non_null(a);
    return a;
}

int audit_check(acemq_audit *a, const char *producer, uint64_t seq, int *cause)
{
    return acemq_audit_check_seq(a, producer, strlen(producer), seq, cause);
}

int audit_check_id(acemq_audit *a, const char *id, int *cause)
{
    return acemq_audit_check(a, id, strlen(id), cause);
}

acemq_audit_stats audit_stats(acemq_audit *a)
{
    acemq_audit_stats s;
    assert_int_equal(acemq_audit_stats_get(a, &s), 0);
    return s;
}

/* A check by split producer or, every other time, by text id. */
int audit_check_either(acemq_audit *a, const char *producer, uint64_t seq, int text, int *cause)
{
    if (!text) return audit_check(a, producer, seq, cause);
    char id[128];
    snprintf(id, sizeof id, "%s:%llu", producer, (unsigned long long)seq);
    return audit_check_id(a, id, cause);
}
