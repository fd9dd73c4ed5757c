/* fuzz_url.c — libFuzzer target for every URL acemq reads from outside:
 * the input (to its first NUL) as a backend or broker URL, through the
 * parse steps each open runs before it connects or creates anything.
 *
 * What must hold: the core split (core/url.h) accepts exactly the texts
 * with a scheme and at most ACEMQ__URL_MAX_PARAMS well-formed parameters,
 * and what it accepts round-trips: its fields percent-encoded back into a
 * URL split into the same fields. acemq__idem_url_check agrees with the
 * registry. Each store's parser (sqlite, postgres, redis) leaves what it
 * accepts in range, and postgres's libpq URI keeps the URL's own parameters
 * but the store's. rabbitmq-c's amqp_parse_url (the amqp:// broker's parse
 * step) and the memory: broker's open (no connection) run too. Nothing
 * leaks, crashes or reads out of bounds (ASan, UBSan).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>

#include "acemq/broker.h"
#include "acemq/common.h"
#include "backends/builtin.h"
#include "backends/postgres/idem_pg.h"
#include "backends/redis/idem_redis.h"
#include "backends/sqlite/idem_store.h"
#include "core/buf.h"
#include "core/registry.h"
#include "core/url.h"
#include "idem/idem_backend.h"
#include "idem/idem_url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Appends s, every byte but RFC 3986's unreserved ones as %XX. */
static void put_escaped(acemq__buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_' || c == '~';
        char enc[4];
        int n = plain ? 1 : snprintf(enc, sizeof enc, "%%%02X", c);
        if (plain) enc[0] = (char)c;
        if (acemq__buf_put(b, enc, (size_t)n) != 0) abort();
    }
}

/* u's fields as a URL again: scheme ":" rest, then each parameter escaped. */
static char *unsplit(const acemq__url *u)
{
    acemq__buf b = {0};
    if (acemq__buf_put(&b, u->scheme, strlen(u->scheme)) != 0 || acemq__buf_put(&b, ":", 1) != 0 ||
        acemq__buf_put(&b, u->rest, strlen(u->rest)) != 0)
        abort();
    for (size_t i = 0; i < u->nparams; i++) {
        if (acemq__buf_put(&b, i ? "&" : "?", 1) != 0) abort();
        put_escaped(&b, u->params[i].key);
        if (acemq__buf_put(&b, "=", 1) != 0) abort();
        put_escaped(&b, u->params[i].value);
    }
    char *s = strdup(acemq__buf_str(&b));
    acemq__buf_free(&b);
    if (!s) abort();
    return s;
}

static int same_url(const acemq__url *a, const acemq__url *b)
{
    if (strcmp(a->scheme, b->scheme) != 0 || strcmp(a->rest, b->rest) != 0 ||
        a->nparams != b->nparams)
        return 0;
    for (size_t i = 0; i < a->nparams; i++)
        if (strcmp(a->params[i].key, b->params[i].key) != 0 ||
            strcmp(a->params[i].value, b->params[i].value) != 0)
            return 0;
    return 1;
}

/* The core split and its lookups. */
static void check_split(const char *text, const acemq__url *u)
{
    char scheme[64];
    if (acemq__url_scheme(text, scheme, sizeof scheme) == 0 && strcmp(scheme, u->scheme) != 0)
        abort();
    if (!u->scheme[0] || strchr(u->rest, '?') || u->nparams > ACEMQ__URL_MAX_PARAMS) abort();
    for (size_t i = 0; i < u->nparams; i++) {
        const char *k = u->params[i].key;
        if (!k[0]) abort();
        /* The first of equal keys wins. */
        size_t first = 0;
        while (strcmp(u->params[first].key, k) != 0)
            first++;
        if (acemq__url_param(u, k) != u->params[first].value) abort();
        int64_t v = 12345;
        int rc = acemq__url_param_int(u, k, -1000, 1000, &v);
        if (rc != 0 && (rc != ACEMQ_EURL || v != 12345)) abort();
        if (rc == 0 && (v < -1000 || v > 1000)) abort();
    }
    const char *const known[] = {u->nparams ? u->params[0].key : "", NULL};
    const char *bad = NULL;
    int all_first = 1;
    for (size_t i = 0; i < u->nparams; i++)
        all_first &= strcmp(u->params[i].key, known[0]) == 0;
    int rc = acemq__url_check_params(u, known, &bad);
    if ((rc == 0) != all_first || (rc != 0 && !bad)) abort();

    char *again = unsplit(u);
    acemq__url v;
    rc = acemq__url_parse(&v, again);
    if (rc == ACEMQ_ENOMEM) {
        free(again);
        return;
    }
    if (rc != 0 || !same_url(u, &v)) abort();
    acemq__url_free(&v);
    free(again);
}

static void check_sqlite(acemq_idem *h, const acemq__url *u)
{
    const char *path = NULL;
    if (acemq__sqlite_idem_parse_url(h, u, &path) != 0) return;
    if (!path || !*path || path < u->rest || path > u->rest + strlen(u->rest)) abort();
}

/* libpq's URI: the URL's parameters but table and statement_timeout_ms, in
 * order, and nothing else (backends/postgres/connect.c adds its limits at
 * connect, not here). */
static void check_postgres(acemq_idem *h, const acemq__url *u)
{
    const char *table = NULL;
    int64_t timeout = -1;
    char *conninfo = NULL;
    int rc = acemq__pg_idem_parse_url(h, u, &table, &timeout, &conninfo);
    if (rc != 0) {
        if (conninfo || acemq_idem_errmsg(h)[0] == '\0') abort();
        return;
    }
    if (!conninfo || !table || !*table || timeout < 0 || timeout > INT32_MAX) abort();
    acemq__url c;
    rc = acemq__url_parse(&c, conninfo);
    size_t want = 0;
    for (size_t i = 0; i < u->nparams; i++) {
        const char *k = u->params[i].key;
        if (strcmp(k, "table") != 0 && strcmp(k, "statement_timeout_ms") != 0) want++;
    }
    if (rc == ACEMQ_ENOMEM) {
        free(conninfo);
        return;
    }
    if (rc != 0 || strcmp(c.scheme, u->scheme) != 0 || strcmp(c.rest, u->rest) != 0 ||
        c.nparams != want)
        abort();
    size_t j = 0;
    for (size_t i = 0; i < u->nparams; i++) {
        const char *k = u->params[i].key;
        if (strcmp(k, "table") == 0 || strcmp(k, "statement_timeout_ms") == 0) continue;
        if (strcmp(c.params[j].key, k) != 0 || strcmp(c.params[j].value, u->params[i].value) != 0)
            abort();
        j++;
    }
    acemq__url_free(&c);
    free(conninfo);
}

static int prefix_ok(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > REDIS_PREFIX_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:", p[i]))
            return 0;
    return 1;
}

static void check_redis(acemq_idem *h, const acemq__url *u)
{
    redis_target t;
    char prefix[REDIS_PREFIX_MAX + 1];
    if (acemq__redis_parse_url(h, u, &t, prefix, sizeof prefix) != 0) {
        if (t.user || t.password) abort(); /* freed on failure */
        return;
    }
    if (!t.host[0] || !memchr(t.host, '\0', sizeof t.host) || t.port < 1 || t.port > 65535 ||
        t.db < 0 || t.connect_timeout_ms < 1 || t.command_timeout_ms < 1 || !prefix_ok(prefix) ||
        (t.user && !t.password))
        abort();
    acemq__redis_target_free(&t);
}

/* The amqp:// broker's parse step: rabbitmq-c's parser on a copy it may cut. */
static void check_amqp(const char *text)
{
    char *copy = strdup(text);
    if (!copy) return;
    struct amqp_connection_info info;
    amqp_default_connection_info(&info);
    if (amqp_parse_url(copy, &info) == AMQP_STATUS_OK &&
        (!info.host || !info.user || !info.password || !info.vhost || info.port < 0 ||
         info.port > 65535))
        abort();
    free(copy);
}

/* The memory: broker opens without a connection: open and close it. */
static void check_memory_broker(const char *text)
{
    acemq_broker *b = NULL;
    int rc = acemq_broker_open(&b, text, NULL);
    if ((rc == 0) != (b != NULL) || (rc != 0 && rc != ACEMQ_EURL && rc != ACEMQ_ENOMEM)) abort();
    acemq_broker_close(b);
}

static void check_backends(const char *text, const acemq__url *u)
{
    const acemq__registry_entry *idem = acemq__registry_find(&acemq__idem_registry, u->scheme);
    const acemq__registry_entry *broker = acemq__registry_find(&acemq__broker_registry, u->scheme);
    if (broker == &acemq__amqp_broker_backend.entry) check_amqp(text);
    if (broker == &acemq__memory_broker_backend.entry) check_memory_broker(text);
    if (!idem || idem == &acemq__memory_idem_backend.entry) return;
    acemq_idem *h = NULL;
    if (acemq__idem_new(&h, NULL) != 0) return;
    if (idem == &acemq__sqlite_idem_backend.entry)
        check_sqlite(h, u);
    else if (idem == &acemq__pg_idem_backend.entry || idem == &acemq__pgsql_idem_backend.entry)
        check_postgres(h, u);
    else if (idem == &acemq__redis_idem_backend.entry)
        check_redis(h, u);
    acemq__idem_free(h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    if (size) memcpy(text, data, size);
    text[size] = '\0';

    /* A refusal's reason is cut to fit and always ends in '\0'; an accepted
     * URL writes no reason, so the buffers are read only after a refusal. */
    char why[256], small[8];
    int known = acemq__idem_url_check(text, why, sizeof why);
    if (acemq__idem_url_check(text, small, sizeof small) != known ||
        (known != 0 && (!memchr(small, '\0', sizeof small) || !memchr(why, '\0', sizeof why))))
        abort();

    acemq__url u;
    int rc = acemq__url_parse(&u, text);
    char scheme[64];
    int has_scheme = acemq__url_scheme(text, scheme, sizeof scheme) == 0;
    if (rc == 0) {
        check_split(text, &u);
        if (known != 0 && has_scheme &&
            acemq__registry_find(&acemq__idem_registry, u.scheme) != NULL)
            abort(); /* the check refused a scheme the registry has */
        check_backends(text, &u);
        acemq__url_free(&u);
    } else if (rc != ACEMQ_ENOMEM) {
        if (rc != ACEMQ_EURL || u.buf || u.nparams) abort();
        if (!has_scheme && known == 0) abort(); /* the check took a text with no scheme */
    }
    free(text);
    return 0;
}
