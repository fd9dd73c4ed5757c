/* tcp_proxy.c — a TCP proxy on loopback, run by a thread of the test, that
 * forwards bytes to a broker and can cut every connection through it or stop
 * forwarding (freeze), so a test makes faults without touching the shared
 * broker (tcp_proxy.h). */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "integration/tcp_proxy.h"

#define MAX_PAIRS 8

static struct proxy {
    int upstream_port;
    pthread_mutex_t lock;
    pthread_cond_t done;
    int listen_fd, port;
    int pairs[MAX_PAIRS][2]; /* client side, broker side; -1 when free */
    int frozen, cut_asked, cuts_done, stop;
    pthread_t thread;
} px = {.lock = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static void close_pairs(void)
{
    for (int i = 0; i < MAX_PAIRS; i++)
        for (int k = 0; k < 2; k++)
            if (px.pairs[i][k] >= 0) {
                (void)shutdown(px.pairs[i][k], SHUT_RDWR);
                (void)close(px.pairs[i][k]);
                px.pairs[i][k] = -1;
            }
}

static void accept_one(void)
{
    int c = accept(px.listen_fd, NULL, NULL);
    if (c < 0) return;
    int u = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)px.upstream_port)};
    if (u < 0 || inet_pton(AF_INET, "127.0.0.1", &a.sin_addr) != 1 ||
        connect(u, (struct sockaddr *)&a, sizeof a) != 0) {
        (void)close(c);
        if (u >= 0) (void)close(u);
        return;
    }
    for (int i = 0; i < MAX_PAIRS; i++)
        if (px.pairs[i][0] < 0) {
            px.pairs[i][0] = c;
            px.pairs[i][1] = u;
            return;
        }
    (void)close(c);
    (void)close(u);
}

/* Moves what fd k of pair i has to the other side; a closed side ends the
 * pair. */
static void forward(int i, int k)
{
    char buf[65536];
    ssize_t n = read(px.pairs[i][k], buf, sizeof buf);
    for (ssize_t off = 0; n > 0 && off < n;) {
        ssize_t w = write(px.pairs[i][!k], buf + off, (size_t)(n - off));
        if (w <= 0) {
            n = 0;
            break;
        }
        off += w;
    }
    if (n <= 0)
        for (int j = 0; j < 2; j++) {
            (void)close(px.pairs[i][j]);
            px.pairs[i][j] = -1;
        }
}

static void *proxy_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&px.lock);
        if (px.cut_asked) {
            close_pairs();
            px.cut_asked = 0;
            px.cuts_done++;
            pthread_cond_broadcast(&px.done);
        }
        int stop = px.stop, frozen = px.frozen;
        pthread_mutex_unlock(&px.lock);
        if (stop) break;
        struct pollfd p[1 + 2 * MAX_PAIRS];
        int who[1 + 2 * MAX_PAIRS], n = 0;
        p[n] = (struct pollfd){.fd = px.listen_fd, .events = POLLIN};
        who[n++] = -1;
        for (int i = 0; !frozen && i < MAX_PAIRS; i++)
            for (int k = 0; k < 2 && px.pairs[i][0] >= 0; k++) {
                p[n] = (struct pollfd){.fd = px.pairs[i][k], .events = POLLIN};
                who[n++] = i * 2 + k;
            }
        /* A short poll so that cut, freeze and stop are seen between waits. */
        if (poll(p, (nfds_t)n, 20) <= 0) continue;
        for (int j = 0; j < n; j++) {
            if (!(p[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (who[j] < 0)
                accept_one();
            else if (px.pairs[who[j] / 2][who[j] % 2] == p[j].fd)
                forward(who[j] / 2, who[j] % 2);
        }
    }
    close_pairs();
    return NULL;
}

void tcp_proxy_start(int upstream_port)
{
    px.upstream_port = upstream_port;
    for (int i = 0; i < MAX_PAIRS; i++)
        px.pairs[i][0] = px.pairs[i][1] = -1;
    px.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(px.listen_fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    assert_int_equal(inet_pton(AF_INET, "127.0.0.1", &a.sin_addr), 1);
    assert_int_equal(bind(px.listen_fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(px.listen_fd, 8), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(px.listen_fd, (struct sockaddr *)&a, &len), 0);
    px.port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&px.thread, NULL, proxy_main, NULL), 0);
}

void tcp_proxy_stop(void)
{
    pthread_mutex_lock(&px.lock);
    px.stop = 1;
    pthread_mutex_unlock(&px.lock);
    assert_int_equal(pthread_join(px.thread, NULL), 0);
    (void)close(px.listen_fd);
}

/* Closes every proxied connection, and returns once it is done. */
void tcp_proxy_cut(void)
{
    pthread_mutex_lock(&px.lock);
    int want = px.cuts_done + 1;
    px.cut_asked = 1;
    while (px.cuts_done < want)
        pthread_cond_wait(&px.done, &px.lock);
    pthread_mutex_unlock(&px.lock);
}

void tcp_proxy_freeze(int frozen)
{
    pthread_mutex_lock(&px.lock);
    px.frozen = frozen;
    pthread_mutex_unlock(&px.lock);
}

int tcp_proxy_port(void)
{
    return px.port;
}
