/* pg_limits.h — what acemq's own PostgreSQL connections promise on a cut
 * network (src/backends/postgres/connect.c): keepalive probes and a TCP user
 * timeout on the socket, so that a call on a dead path fails instead of
 * waiting out the kernel, and libpq's connect_timeout. Include after
 * <cmocka.h> and <libpq-fe.h>. */
#ifndef ACEMQ_TESTS_PG_LIMITS_H
#define ACEMQ_TESTS_PG_LIMITS_H

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

typedef struct pg_limits {
    int keepalive_idle_s, keepalive_interval_s, keepalive_count, user_timeout_ms;
    const char *connect_timeout_s;
} pg_limits;

/* The limits connect.c takes when the URL sets none. */
static const pg_limits pg_default_limits = {30, 10, 3, 60000, "10"};

static inline int pg_socket_option(int fd, int level, int name)
{
    int v = -1;
    socklen_t len = sizeof v;
    assert_int_equal(getsockopt(fd, level, name, &v, &len), 0);
    return v;
}

/* c, connected over TCP, holds the limits want. */
static inline void assert_pg_limits(PGconn *c, const pg_limits *want)
{
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    int fd = PQsocket(c);
    assert_true(fd >= 0);
    assert_int_equal(pg_socket_option(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
    assert_int_equal(pg_socket_option(fd, IPPROTO_TCP, TCP_KEEPIDLE), want->keepalive_idle_s);
    assert_int_equal(pg_socket_option(fd, IPPROTO_TCP, TCP_KEEPINTVL), want->keepalive_interval_s);
    assert_int_equal(pg_socket_option(fd, IPPROTO_TCP, TCP_KEEPCNT), want->keepalive_count);
    assert_int_equal(pg_socket_option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), want->user_timeout_ms);
    PQconninfoOption *opts = PQconninfo(c);
    assert_non_null(opts);
    const char *connect_timeout = NULL;
    for (const PQconninfoOption *o = opts; o->keyword; o++)
        if (strcmp(o->keyword, "connect_timeout") == 0) connect_timeout = o->val;
    assert_non_null(connect_timeout);
    assert_string_equal(connect_timeout, want->connect_timeout_s);
    PQconninfoFree(opts);
}

#endif
