/* idem_redis.h — the Redis idempotency store's state, shared by its files:
 * connection.c parses the URL, connects, and exchanges commands (with the
 * reconnect and the NOSCRIPT reload), scripts.c holds the Lua scripts,
 * idem_open.c opens the store and checks the server's durability, idem.c and
 * idem_admin.c are the methods. Internal to src/backends/redis/.
 *
 * Invariants:
 *   Keys. A store's keys all carry the hash tag {P} (P: the URL's prefix):
 *   its records are {P}:id:<id bytes> (a string), its token counter is
 *   {P}:token. One store lives in one Cluster slot, so every script may touch
 *   a record and the counter together, and a batch goes to one node.
 *   Tokens. Every claim takes a value of {P}:token that the claim
 *   script's INCRBY reserved for it, a key that never expires, so no token
 *   is issued twice in a store whatever expired, was released, purged or
 *   forgotten.
 *   Times. With the system clock the scripts read the server's clock
 *   (TIME), so clients whose clocks disagree agree on leases; with an
 *   injected clock they take the core's now_ms. Records keep absolute
 *   times (l: lease end, e: retention end), and every decision compares
 *   them with that now. Each record also has a key expiry (PEXPIRE, a
 *   duration): lease + retention for a claim, retention for a
 *   confirmation, so Redis removes what purge would.
 *   One call at a time per handle: the mutex guards the connection, and a
 *   call that fails on the wire drops the connection; the next call
 *   connects again. Each operation is one script, so a call lost with
 *   the connection either ran whole on the server or not at all.
 */
#ifndef ACEMQ_BACKENDS_REDIS_IDEM_REDIS_H
#define ACEMQ_BACKENDS_REDIS_IDEM_REDIS_H

#include <hiredis/hiredis.h>
#include <pthread.h>

#include "idem/idem_backend.h"

#define REDIS_PREFIX_MAX 64
#define REDIS_DEFAULT_PREFIX "acemq"
#define REDIS_DEFAULT_PORT 6379
#define REDIS_DEFAULT_CONNECT_TIMEOUT_MS 2000
#define REDIS_DEFAULT_COMMAND_TIMEOUT_MS 5000
#define REDIS_ARGV_MAX 16     /* EVALSHA, sha, 2, two keys and the scripts' arguments */
#define REDIS_PIPELINE_MAX 64 /* commands in one pipeline */
#define REDIS_CLAIM_MAX 64    /* ids in one run of the claim script */
/* EVALSHA, sha, numkeys, the records, the counter, now, retention, and
 * three arguments a record. */
#define REDIS_CLAIM_ARGV (3 + REDIS_CLAIM_MAX + 1 + 2 + 3 * REDIS_CLAIM_MAX)
#define REDIS_CONFIRM_MAX 64 /* ids in one run of the confirm_many script */
/* EVALSHA, sha, numkeys, the records, now, retention, and two arguments a
 * record. */
#define REDIS_CONFIRM_ARGV (3 + REDIS_CONFIRM_MAX + 2 + 2 * REDIS_CONFIRM_MAX)

/* The store's scripts (scripts.c), by index. */
enum {
    RS_CLAIM,
    RS_CONFIRM,
    RS_RELEASE,
    RS_RENEW,
    RS_IS_CONFIRMED,
    RS_PURGE,
    RS_INSPECT,
    RS_CONFIRM_MANY,
    RS_COUNT
};

/* Where and how to connect: the URL, parsed. */
typedef struct redis_target {
    char host[256];
    int port;
    char *user;     /* NULL: AUTH with the password alone */
    char *password; /* NULL: no AUTH */
    int db;
    int connect_timeout_ms;
    int command_timeout_ms;
} redis_target;

typedef struct redis_idem {
    pthread_mutex_t lock;  /* one call at a time on c */
    redisContext *c;       /* NULL: connect on the next call */
    int64_t last_reply_ms; /* CLOCK_MONOTONIC: c's last reply (or connect) */
    redis_target target;
    int server_clock; /* 1: the scripts read the server's TIME */
    char prefix[REDIS_PREFIX_MAX + 1];
    char token_key[REDIS_PREFIX_MAX + 16];
    size_t key_head; /* bytes of "{P}:id:" at the start of key */
    char key[REDIS_PREFIX_MAX + 8 + ACEMQ_IDEM_ID_MAX];
    char sha[RS_COUNT][41];
} redis_idem;

/* scripts.c: the Lua text of each script. */
extern const char *const acemq__redis_scripts[RS_COUNT];

/* connection.c */
/* Parses url into *t (strings malloc'd: acemq__redis_target_free). 0, or an
 * error with its text on h. */
int acemq__redis_parse_url(acemq_idem *h, const acemq__url *url, redis_target *t, char *prefix,
                           size_t prefix_cap);
void acemq__redis_target_free(redis_target *t);
/* Connects when r has no connection (or the server closed it while idle),
 * authenticates, selects the db; 0, or an error with its text on h. Caller
 * holds r->lock. */
int acemq__redis_ensure(acemq_idem *h);
/* Drops the connection; the next call connects again. */
void acemq__redis_drop(redis_idem *r);
/* Loads every script (SCRIPT LOAD) on the connection, keeping their SHA1s. */
int acemq__redis_load_scripts(acemq_idem *h);
/* Sends one command and reads its reply into *reply (freeReplyObject).
 * Error replies are left to the caller. 0, or an error (the connection
 * dropped) with its text on h. Caller holds r->lock. */
int acemq__redis_command(acemq_idem *h, int argc, const char **argv, const size_t *lens,
                         redisReply **reply);
/* Sends argv, an EVALSHA of one of r->sha; reloads the scripts and sends
 * it once more on NOSCRIPT. An error reply becomes ACEMQ_EBACKEND. Caller
 * holds r->lock. */
int acemq__redis_evalsha(acemq_idem *h, int argc, const char **argv, const size_t *lens,
                         redisReply **reply);
/* EVALSHA of script `which` with one key (the record r->key holds, klen
 * bytes) and nargs arguments; reloads the scripts and runs it once more on
 * NOSCRIPT. An error reply becomes ACEMQ_EBACKEND. Caller holds r->lock. */
int acemq__redis_script(acemq_idem *h, int which, size_t klen, int nargs, const char **args,
                        const size_t *lens, redisReply **reply);
/* Builds element i's command into argv/lens (REDIS_ARGV_MAX at most);
 * returns argc. */
typedef int (*acemq__redis_build_fn)(acemq_idem *h, void *ctx, size_t i, const char **argv,
                                     size_t *lens);
/* Sends the n (<= REDIS_PIPELINE_MAX) script calls build makes in one write
 * and reads their replies into replies[] (NULL where none came: the
 * connection failed, and its error is returned). Calls answered NOSCRIPT
 * are run again, in order, after the scripts are loaded. Other error
 * replies are left to the caller. Caller holds r->lock. */
int acemq__redis_script_many(acemq_idem *h, size_t n, acemq__redis_build_fn build, void *ctx,
                             redisReply **replies);
/* The EVALSHA argv of script `which` on record key (klen bytes) and the
 * token counter, with nargs arguments; returns argc. */
int acemq__redis_evalsha_argv(redis_idem *r, int which, const char *key, size_t klen, int nargs,
                              const char **args, const size_t *arglens, const char **argv,
                              size_t *lens);
/* 1 when reply is the NOSCRIPT error. */
int acemq__redis_is_noscript(const redisReply *reply);
/* Records hiredis's words for a failed exchange on h and drops the
 * connection: ACEMQ_EIO. */
int acemq__redis_io_fail(acemq_idem *h, const char *doing);
/* Writes "{P}:id:<id>" into r->key; returns its length. */
size_t acemq__redis_key(redis_idem *r, const acemq__bytes *id);

/* idem_open.c */
void acemq__redis_idem_close(acemq_idem *h);

/* idem.c */
extern const acemq__idem_methods acemq__redis_idem_methods;
/* idem_admin.c */
int acemq__redis_idem_counts(acemq_idem *h, int64_t now_ms, acemq_idem_counts *out);
int acemq__redis_idem_inspect(acemq_idem *h, const acemq__bytes *id, int64_t now_ms,
                              acemq_idem_record *out);
int acemq__redis_idem_forget(acemq_idem *h, const acemq__bytes *id, int64_t now_ms);
/* Walks the store's records with SCAN, calling fn with each batch of keys
 * (at most REDIS_PIPELINE_MAX); stops at fn's first non-zero return, which
 * it returns. Caller holds r->lock. */
int acemq__redis_scan(acemq_idem *h,
                      int (*fn)(acemq_idem *h, redisReply **keys, size_t n, void *arg), void *arg);

#endif
