/* uuid.c — UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then a counter
 * and random bits, so ids made by one process sort in the order they were made
 * and ids from several machines do not collide.
 *
 * Monotonic within a process (RFC 9562 section 6.2, method 1): the 12-bit
 * rand_a field is a counter that starts at a random value below 2^11 each new
 * millisecond and steps by one within it; when it would overflow, the
 * timestamp is moved one millisecond ahead rather than going backwards.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/uuid.h"

static pthread_mutex_t uuid_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t last_ms;
static unsigned counter;

static int random_bytes(unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int acemq_uuid7(char buf[ACEMQ__UUID_LEN + 1])
{
    if (!buf) return ACEMQ_EINVAL;
    unsigned char r[10];
    if (random_bytes(r, sizeof r) != 0) return ACEMQ_EIO;
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return ACEMQ_EIO;
    uint64_t ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;

    pthread_mutex_lock(&uuid_lock);
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
