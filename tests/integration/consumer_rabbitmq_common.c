/* consumer_rabbitmq_common.c — the helpers the parts of
 * test_consumer_rabbitmq share: work queues on the admin connection
 * (broker_amqp_fixture.c), temporary directories, fresh stores on the
 * shared servers and their removal, and a consumer on a thread.
 */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include <amqp.h>
#include <amqp_framing.h>

#include "acemq/idem.h"
#include "conformance/backends.h"
#include "integration/broker_amqp_fixture.h"
#include "integration/consumer_rabbitmq.h"

/* --- queues --------------------------------------------------------------- */

void work_queue(char *q, size_t len, const char *what, int quorum)
{
    char tag[96];
    (void)snprintf(tag, sizeof tag, "consumer.%s", what);
    test_name(q, len, tag);
    amqp_table_entry_t e[2] = {
        {.key = amqp_cstring_bytes("x-expires"),
         .value = {.kind = AMQP_FIELD_KIND_I32, .value.i32 = 600000}},
        {.key = amqp_cstring_bytes("x-queue-type"),
         .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes("quorum")}},
    };
    amqp_table_t args = {.num_entries = quorum ? 2 : 1, .entries = e};
    amqp_maybe_release_buffers(admin_conn);
    amqp_queue_declare(admin_conn, 1, amqp_cstring_bytes(q), 0, 1, 0, 0, args);
    must_ok(amqp_get_rpc_reply(admin_conn), "queue.declare");
    amqp_queue_purge(admin_conn, 1, amqp_cstring_bytes(q));
    must_ok(amqp_get_rpc_reply(admin_conn), "queue.purge");
}

void drop_queue(const char *q)
{
    amqp_maybe_release_buffers(admin_conn);
    amqp_queue_delete(admin_conn, 1, amqp_cstring_bytes(q), 0, 0);
    must_ok(amqp_get_rpc_reply(admin_conn), "queue.delete");
}

void queue_counts(const char *q, uint32_t *ready, uint32_t *consumers)
{
    amqp_maybe_release_buffers(admin_conn);
    amqp_queue_declare_ok_t *ok =
        amqp_queue_declare(admin_conn, 1, amqp_cstring_bytes(q), 1, 0, 0, 0, amqp_empty_table);
    must_ok(amqp_get_rpc_reply(admin_conn), "passive queue.declare");
    if (ready) *ready = ok->message_count;
    if (consumers) *consumers = ok->consumer_count;
}

uint32_t ready_once_idle(const char *q)
{
    uint32_t ready = 0, consumers = 1;
    for (int64_t until = mono_ms() + 60000; mono_ms() < until; sleep_ms(50)) {
        queue_counts(q, &ready, &consumers);
        if (consumers == 0) return ready;
    }
    fail_msg("%s still has %u consumers a minute after they were closed", q, (unsigned)consumers);
    return ready;
}

/* --- time ----------------------------------------------------------------- */

int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

/* --- files and stores ----------------------------------------------------- */

void make_tmpdir(char *dir, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    (void)snprintf(dir, len, "%s/acemq-consumer-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) fail_msg("mkdtemp %s", dir);
}

void rm_tmpdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[600];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        (void)snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        (void)unlink(path);
    }
    closedir(d);
    (void)rmdir(dir);
}

int store_url(char *url, size_t len, const char *kind, const char *dir)
{
    static int n;
    char name[80];
    (void)snprintf(name, sizeof name, "consumer_rmq_%ld_%ld_%d", (long)getpid(),
                   (long)(mono_ms() % 1000000), ++n);
    if (strcmp(kind, "sqlite") == 0) {
        (void)snprintf(url, len, "sqlite:%s/idem.db", dir);
        return 0;
    }
    const char *var = strcmp(kind, "postgres") == 0 ? "ACEMQ_PG_URL" : "ACEMQ_REDIS_URL";
    const char *base = getenv(var);
    if (!base || !*base) return -1;
    (void)snprintf(url, len, "%s%s%s=%s", base, strchr(base, '?') ? "&" : "?",
                   strcmp(kind, "postgres") == 0 ? "table" : "prefix", name);
    return 0;
}

acemq_idem *open_store(const char *url)
{
    acemq_idem *h = NULL;
    int rc = acemq_idem_open(&h, url, NULL);
    if (rc != 0) fail_msg("store %s: %s: %s", url, acemq_err_name(rc), acemq_idem_errmsg(NULL));
    return h;
}

/* The table's store: the table and its token sequence. */
static void drop_pg(const char *url)
{
    const char *base = getenv("ACEMQ_PG_URL");
    char t[96];
    if (!base || test_backend_url_param(url, "table", t, sizeof t) != 0) return;
    PGconn *c = PQconnectdb(base);
    if (PQstatus(c) == CONNECTION_OK) {
        char sql[300];
        (void)snprintf(sql, sizeof sql,
                       "DROP TABLE IF EXISTS \"%s\"; DROP SEQUENCE IF EXISTS \"%s_token\"", t, t);
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            print_message("dropping %s: %s", t, PQresultErrorMessage(r));
        PQclear(r);
    }
    PQfinish(c);
}

/* Every key of the prefix's store ({P}:...). ACEMQ_REDIS_URL as
 * scripts/services.sh sets it: redis://host:port, no password. */
static void drop_redis(const char *url)
{
    const char *base = getenv("ACEMQ_REDIS_URL");
    char p[96];
    if (!base || test_backend_url_param(url, "prefix", p, sizeof p) != 0 ||
        strncmp(base, "redis://", 8) != 0 || strchr(base, '@'))
        return;
    char host[128];
    int port = 6379;
    (void)snprintf(host, sizeof host, "%s", base + 8);
    host[strcspn(host, "/?")] = '\0';
    char *colon = strrchr(host, ':');
    if (colon) {
        port = atoi(colon + 1);
        *colon = '\0';
    }
    redisContext *r = redisConnect(host, port);
    if (!r || r->err) {
        redisFree(r);
        return;
    }
    char pattern[128], cursor[32] = "0";
    (void)snprintf(pattern, sizeof pattern, "{%s}:*", p);
    do {
        redisReply *rep = redisCommand(r, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
            freeReplyObject(rep);
            break;
        }
        (void)snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
        redisReply *keys = rep->element[1];
        for (size_t i = 0; i < keys->elements; i++)
            freeReplyObject(
                redisCommand(r, "DEL %b", keys->element[i]->str, (size_t)keys->element[i]->len));
        freeReplyObject(rep);
    } while (strcmp(cursor, "0") != 0);
    redisFree(r);
}

void drop_store(const char *kind, const char *url)
{
    if (strcmp(kind, "postgres") == 0) drop_pg(url);
    if (strcmp(kind, "redis") == 0) drop_redis(url);
}

/* --- a consumer on a thread ------------------------------------------------ */

struct runner {
    acemq_consumer *c;
    pthread_t thread;
    atomic_int done;
    int rc;
};

static void *runner_main(void *arg)
{
    runner *r = arg;
    r->rc = acemq_consumer_run(r->c, NULL);
    atomic_store(&r->done, 1);
    return NULL;
}

runner *start_runner(acemq_consumer *c)
{
    runner *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->c = c;
    assert_int_equal(pthread_create(&r->thread, NULL, runner_main, r), 0);
    return r;
}

int runner_done(runner *r)
{
    return atomic_load(&r->done);
}

int stop_runner(runner *r)
{
    acemq_consumer_stop(r->c);
    assert_int_equal(pthread_join(r->thread, NULL), 0);
    int rc = r->rc;
    free(r);
    return rc;
}
