/* net_proxy.c — the loopback TCP proxy of net_proxy.h: one thread, one
 * poll() loop over non-blocking sockets, a mutex for the mode and the
 * requests of other threads.
 *
 * Each connection is a pair (client side, broker side) with one buffer per
 * direction. A direction reads from its source only while its buffer is
 * empty and writes to its destination while it is not, so no write ever
 * blocks the loop, and a peer that stops reading slows only its own pair.
 * A direction the mode switches off is neither read nor written, and a
 * socket with no direction on is left out of poll() altogether: its hang-up
 * is noticed only once the mode is back, which is the point of a stall. */
#include "integration/net_proxy.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_PAIRS 256
#define BUF_SIZE 32768

enum { CLIENT = 0, BROKER = 1 }; /* direction d reads side d, writes side !d */

struct dir {
    size_t len, off; /* bytes in buf not yet written: buf[off .. len) */
    char buf[BUF_SIZE];
};

struct pair {
    int fd[2];       /* CLIENT, BROKER; -1 when the slot is free */
    struct dir *dir; /* [2]: CLIENT (up, to the broker), BROKER (down) */
};

struct net_proxy {
    int listen_fd, port, upstream_port;
    pthread_t thread;
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t done;
    enum net_proxy_mode mode;
    long mode_asked, mode_seen; /* changes of mode asked for, and taken by the thread */
    int stop, cut_asked, cut_rst, cut_count;
    long cuts_done;
    struct net_proxy_stats stats;
    /* Touched by the thread only. */
    struct pair pairs[MAX_PAIRS];
    struct pollfd pf[1 + 2 * MAX_PAIRS];
    int who[1 + 2 * MAX_PAIRS]; /* of pf[j]: -1 the listener, else pair * 2 + side */
};

const char *net_proxy_mode_name(enum net_proxy_mode mode)
{
    switch (mode) {
    case NET_PROXY_PASS:
        return "pass";
    case NET_PROXY_STALL:
        return "stall";
    case NET_PROXY_HOLD:
        return "hold";
    }
    return "?";
}

/* Whether direction d moves bytes in mode m. */
static int dir_on(enum net_proxy_mode m, int d)
{
    return m == NET_PROXY_PASS || (m == NET_PROXY_HOLD && d == CLIENT);
}

static void close_pair(struct net_proxy *p, struct pair *pr, int rst)
{
    for (int k = 0; k < 2; k++) {
        if (pr->fd[k] < 0) continue;
        if (rst) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            (void)setsockopt(pr->fd[k], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        }
        (void)close(pr->fd[k]);
        pr->fd[k] = -1;
    }
    free(pr->dir);
    pr->dir = NULL;
    p->stats.open--;
}

static int set_nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int loopback(struct sockaddr_in *a, int port)
{
    *a = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    return inet_pton(AF_INET, "127.0.0.1", &a->sin_addr) == 1 ? 0 : -1;
}

/* Takes one waiting connection and connects its broker side; a connection
 * that cannot be proxied (broker down, no free slot) is closed, which its
 * client reads as a broker that went away. */
static void accept_one(struct net_proxy *p)
{
    int c = accept(p->listen_fd, NULL, NULL);
    if (c < 0) return;
    struct pair *pr = NULL;
    for (int i = 0; i < MAX_PAIRS && !pr; i++)
        if (p->pairs[i].fd[0] < 0) pr = &p->pairs[i];
    struct sockaddr_in a;
    int u = socket(AF_INET, SOCK_STREAM, 0);
    struct dir *dir = calloc(2, sizeof *dir);
    if (!pr || u < 0 || !dir || loopback(&a, p->upstream_port) != 0 ||
        connect(u, (struct sockaddr *)&a, sizeof a) != 0 || set_nonblocking(c) != 0 ||
        set_nonblocking(u) != 0) {
        (void)close(c);
        if (u >= 0) (void)close(u);
        free(dir);
        return;
    }
    pr->fd[CLIENT] = c;
    pr->fd[BROKER] = u;
    pr->dir = dir;
    pthread_mutex_lock(&p->lock);
    p->stats.accepted++;
    p->stats.open++;
    pthread_mutex_unlock(&p->lock);
}

/* Moves bytes of direction d as far as the sockets allow. 0, or -1 when a
 * side closed or failed and the pair is to end. */
static int pump(struct net_proxy *p, struct pair *pr, int d)
{
    struct dir *dr = &pr->dir[d];
    if (dr->off == dr->len) {
        ssize_t n = read(pr->fd[d], dr->buf, sizeof dr->buf);
        if (n == 0) return -1;
        if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
        dr->off = 0;
        dr->len = (size_t)n;
    }
    while (dr->off < dr->len) {
        ssize_t w = send(pr->fd[!d], dr->buf + dr->off, dr->len - dr->off, MSG_NOSIGNAL);
        if (w < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
        dr->off += (size_t)w;
        pthread_mutex_lock(&p->lock);
        if (d == CLIENT)
            p->stats.up += w;
        else
            p->stats.down += w;
        pthread_mutex_unlock(&p->lock);
    }
    return 0;
}

/* The events pair side k waits for in mode m: reading for its own
 * direction while that one's buffer is empty, writing for the other's
 * while that one holds bytes. */
static short side_events(const struct pair *pr, enum net_proxy_mode m, int k)
{
    short ev = 0;
    if (dir_on(m, k) && pr->dir[k].off == pr->dir[k].len) ev |= POLLIN;
    if (dir_on(m, !k) && pr->dir[!k].off < pr->dir[!k].len) ev |= POLLOUT;
    return ev;
}

/* Answers a cut asked for by another thread; called with the lock held. */
static void do_cut(struct net_proxy *p)
{
    int n = 0;
    for (int i = 0; i < MAX_PAIRS; i++)
        if (p->pairs[i].fd[0] >= 0) {
            close_pair(p, &p->pairs[i], p->cut_rst);
            n++;
        }
    p->stats.cut += n;
    p->cut_count = n;
    p->cut_asked = 0;
    p->cuts_done++;
    pthread_cond_broadcast(&p->done);
}

static void *proxy_main(void *arg)
{
    struct net_proxy *p = arg;
    struct pollfd *pf = p->pf;
    int *who = p->who;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        if (p->cut_asked) do_cut(p);
        int stop = p->stop;
        enum net_proxy_mode m = p->mode;
        if (p->mode_seen != p->mode_asked) {
            p->mode_seen = p->mode_asked;
            pthread_cond_broadcast(&p->done);
        }
        pthread_mutex_unlock(&p->lock);
        if (stop) break;
        nfds_t n = 0;
        pf[n] = (struct pollfd){.fd = p->listen_fd, .events = POLLIN};
        who[n++] = -1;
        for (int i = 0; i < MAX_PAIRS; i++)
            for (int k = 0; k < 2 && p->pairs[i].fd[0] >= 0; k++) {
                short ev = side_events(&p->pairs[i], m, k);
                if (!ev) continue;
                pf[n] = (struct pollfd){.fd = p->pairs[i].fd[k], .events = ev};
                who[n++] = i * 2 + k;
            }
        /* A short poll, so that a mode change, a cut or a stop is seen soon. */
        if (poll(pf, n, 20) <= 0) continue;
        for (nfds_t j = 0; j < n; j++) {
            if (!pf[j].revents) continue;
            if (who[j] < 0) {
                accept_one(p);
                continue;
            }
            struct pair *pr = &p->pairs[who[j] / 2];
            int k = who[j] % 2;
            if (pr->fd[k] != pf[j].fd) continue; /* the pair ended earlier in this round */
            /* Readable, or a hang-up / error: the read or send tells which. */
            int rc = 0;
            if (pf[j].revents & (POLLIN | POLLHUP | POLLERR) && dir_on(m, k)) rc = pump(p, pr, k);
            if (rc == 0 && pf[j].revents & (POLLOUT | POLLHUP | POLLERR) && dir_on(m, !k))
                rc = pump(p, pr, !k);
            if (rc != 0) {
                pthread_mutex_lock(&p->lock);
                close_pair(p, pr, 0);
                pthread_mutex_unlock(&p->lock);
            }
        }
    }
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < MAX_PAIRS; i++)
        if (p->pairs[i].fd[0] >= 0) close_pair(p, &p->pairs[i], 0);
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int net_proxy_open(net_proxy **out, int listen_port, int upstream_port)
{
    *out = NULL;
    struct net_proxy *p = calloc(1, sizeof *p);
    if (!p) return -1;
    p->upstream_port = upstream_port;
    p->mode = NET_PROXY_PASS;
    for (int i = 0; i < MAX_PAIRS; i++)
        p->pairs[i].fd[0] = p->pairs[i].fd[1] = -1;
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int one = 1, err;
    p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (p->listen_fd < 0 || loopback(&a, listen_port) != 0 ||
        setsockopt(p->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(p->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(p->listen_fd, 64) != 0 ||
        getsockname(p->listen_fd, (struct sockaddr *)&a, &len) != 0 ||
        set_nonblocking(p->listen_fd) != 0) /* a client gone before accept: no wait */
        goto fail;
    p->port = ntohs(a.sin_port);
    if (pthread_mutex_init(&p->lock, NULL) != 0) goto fail;
    if (pthread_cond_init(&p->done, NULL) != 0) goto fail_mutex;
    if ((err = pthread_create(&p->thread, NULL, proxy_main, p)) != 0) {
        errno = err;
        goto fail_cond;
    }
    *out = p;
    return 0;
fail_cond:
    (void)pthread_cond_destroy(&p->done);
fail_mutex:
    (void)pthread_mutex_destroy(&p->lock);
fail:
    err = errno;
    if (p->listen_fd >= 0) (void)close(p->listen_fd);
    free(p);
    errno = err;
    return -1;
}

void net_proxy_close(net_proxy *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_mutex_unlock(&p->lock);
    (void)pthread_join(p->thread, NULL);
    (void)close(p->listen_fd);
    (void)pthread_cond_destroy(&p->done);
    (void)pthread_mutex_destroy(&p->lock);
    free(p);
}

int net_proxy_port(const net_proxy *p)
{
    return p->port;
}

void net_proxy_set_mode(net_proxy *p, enum net_proxy_mode mode)
{
    pthread_mutex_lock(&p->lock);
    p->mode = mode;
    long want = ++p->mode_asked;
    /* Until the thread's next round, bytes may still move by the old mode. */
    while (p->mode_seen < want && !p->stop)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

enum net_proxy_mode net_proxy_get_mode(net_proxy *p)
{
    pthread_mutex_lock(&p->lock);
    enum net_proxy_mode m = p->mode;
    pthread_mutex_unlock(&p->lock);
    return m;
}

int net_proxy_cut(net_proxy *p, int rst)
{
    pthread_mutex_lock(&p->lock);
    long want = p->cuts_done + 1;
    /* Two threads cutting at once share one cut; the stronger kind wins. */
    p->cut_rst = p->cut_asked ? (p->cut_rst || rst) : rst;
    p->cut_asked = 1;
    while (p->cuts_done < want)
        pthread_cond_wait(&p->done, &p->lock);
    int n = p->cut_count;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void net_proxy_get_stats(net_proxy *p, struct net_proxy_stats *s)
{
    pthread_mutex_lock(&p->lock);
    *s = p->stats;
    pthread_mutex_unlock(&p->lock);
}
