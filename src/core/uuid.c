/* uuid.c — UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then a counter
 * and random bits, so ids made by one process sort in the order they were made
 * and ids from several machines do not collide.
 *
 * Monotonic within a process (RFC 9562 section 6.2, method 1): the 12-bit
 * rand_a field is a counter that starts at a random value below 2^11 each new
 * millisecond and steps by one within it; when it would overflow, the
 * timestamp is moved one millisecond ahead rather than going backwards.
 *
 * The random bits come from getrandom, drawn a pool at a time: a system call
 * per id costs as much as the rest of a route's exchange, and each byte of
 * the pool is handed out once. A fork waits for uuid_lock, and the child
 * starts with an empty pool, so parent and child never hand out the same
 * bytes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/uuid.h"

#define RANDOM_DRAW 10 /* bytes per id: 11 bits of counter start, 62 of rand_b */

/* All of it under uuid_lock. pool_left bytes at the pool's end are unused. */
static pthread_mutex_t uuid_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t last_ms;
static unsigned counter;
static unsigned char pool[4000];
static size_t pool_left;
static pthread_once_t fork_guard = PTHREAD_ONCE_INIT;
static int fork_guard_rc;

/* A fork happens between two ids, never inside one. */
static void lock_before_fork(void)
{
    pthread_mutex_lock(&uuid_lock);
}

static void unlock_in_parent(void)
{
    pthread_mutex_unlock(&uuid_lock);
}

/* In the child, the only thread left: the pool's bytes are also the
 * parent's. */
static void forget_pool_in_child(void)
{
    pool_left = 0;
    pthread_mutex_unlock(&uuid_lock);
}

static void install_fork_guard(void)
{
    fork_guard_rc = pthread_atfork(lock_before_fork, unlock_in_parent, forget_pool_in_child);
}

static int fill_pool(void)
{
    size_t have = 0;
    while (have < sizeof pool) {
        ssize_t got = getrandom(pool + have, sizeof pool - have, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        have += (size_t)got;
    }
    pool_left = sizeof pool;
    return 0;
}

/* RANDOM_DRAW fresh random bytes into r; the caller holds uuid_lock. */
static int draw_random(unsigned char r[RANDOM_DRAW])
{
    if (pool_left < RANDOM_DRAW && fill_pool() != 0) return -1;
    memcpy(r, pool + sizeof pool - pool_left, RANDOM_DRAW);
    /* Handed out once: wiped, so the bytes are not in memory twice. */
    memset(pool + sizeof pool - pool_left, 0, RANDOM_DRAW);
    pool_left -= RANDOM_DRAW;
    return 0;
}

int acemq_uuid7(char buf[ACEMQ__UUID_LEN + 1])
{
    if (!buf) return ACEMQ_EINVAL;
    if (pthread_once(&fork_guard, install_fork_guard) != 0 || fork_guard_rc != 0) return ACEMQ_EIO;
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return ACEMQ_EIO;
    uint64_t ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;

    unsigned char r[RANDOM_DRAW];
    pthread_mutex_lock(&uuid_lock);
    if (draw_random(r) != 0) {
        pthread_mutex_unlock(&uuid_lock);
        return ACEMQ_EIO;
    }
    if (ms > last_ms) {
        last_ms = ms;
        counter = ((unsigned)r[0] << 8 | r[1]) & 0x7FF;
    } else if (++counter > 0xFFF) {
        last_ms++;
        counter = 0;
    }
    ms = last_ms;
    unsigned seq = counter;
    pthread_mutex_unlock(&uuid_lock);

    unsigned char u[16];
    for (int i = 0; i < 6; i++)
        u[i] = (unsigned char)(ms >> (40 - 8 * i));
    u[6] = (unsigned char)(0x70 | (seq >> 8));
    u[7] = (unsigned char)seq;
    memcpy(u + 8, r + 2, 8);
    u[8] = (unsigned char)(0x80 | (u[8] & 0x3F));
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) buf[o++] = '-';
        buf[o++] = hex[u[i] >> 4];
        buf[o++] = hex[u[i] & 15];
    }
    buf[o] = '\0';
    return 0;
}
