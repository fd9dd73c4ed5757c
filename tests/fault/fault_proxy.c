/* fault_proxy.c — the fault suite's network faults: a TCP proxy on loopback
 * in front of the broker (tests/integration/net_proxy.c), steered by a shell
 * script while the pipeline runs through it.
 *
 *   fault_proxy [--port N] [--control-port N] UPSTREAM_PORT
 *
 * Forwards every connection made to 127.0.0.1:PORT to 127.0.0.1:UPSTREAM_PORT
 * (ports 0 or left out: ephemeral ones), and first prints one line on
 * standard output:
 *
 *   fault_proxy: port P control C upstream U
 *
 * Control: connect to 127.0.0.1:C and send commands, one a line; each is
 * answered with one line, "ok MODE accepted A open O cut K up BYTES down
 * BYTES" (the state once the command took effect), or "error ...":
 *   pass    forward both ways (the start)
 *   stall   forward nothing either way and read nothing, connections left
 *           open: a path that silently drops packets, noticed only by
 *           heartbeats or timeouts; new connections are taken into the
 *           stall too. Back to pass, what waited flows on.
 *   hold    forward the clients' bytes to the broker, hold its replies
 *           back (unread): a publish whose confirm never comes
 *   reset   close every current connection with an RST on both sides
 *           (SO_LINGER 0); the mode stays, and new connections are taken
 *   cut     the same with a FIN
 *   status  the answer line alone
 * From bash: exec 3<>/dev/tcp/127.0.0.1/C; echo stall >&3; read -r line <&3.
 * One control connection is served at a time.
 *
 * SIGTERM or SIGINT closes everything and exits 0; status 1 when the proxy
 * cannot start, 2 on a usage error. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "integration/net_proxy.h"

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

/* 0 with *out in 0..65535, or -1. */
static int parse_port(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > 65535) return -1;
    *out = (int)v;
    return 0;
}

static int control_listen(int port, int *bound)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    socklen_t len = sizeof a;
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (inet_pton(AF_INET, "127.0.0.1", &a.sin_addr) != 1 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        int err = errno;
        (void)close(fd);
        errno = err;
        return -1;
    }
    *bound = ntohs(a.sin_port);
    return fd;
}

/* Runs one command line; the answer goes into out. */
static void run_command(net_proxy *p, const char *cmd, char *out, size_t len)
{
    if (strcmp(cmd, "pass") == 0)
        net_proxy_set_mode(p, NET_PROXY_PASS);
    else if (strcmp(cmd, "stall") == 0)
        net_proxy_set_mode(p, NET_PROXY_STALL);
    else if (strcmp(cmd, "hold") == 0)
        net_proxy_set_mode(p, NET_PROXY_HOLD);
    else if (strcmp(cmd, "reset") == 0 || strcmp(cmd, "cut") == 0)
        (void)net_proxy_cut(p, cmd[0] == 'r');
    else if (strcmp(cmd, "status") != 0) {
        (void)snprintf(out, len, "error unknown command: %.64s\n", cmd);
        return;
    }
    struct net_proxy_stats s;
    net_proxy_get_stats(p, &s);
    (void)snprintf(out, len, "ok %s accepted %ld open %ld cut %ld up %lld down %lld\n",
                   net_proxy_mode_name(net_proxy_get_mode(p)), s.accepted, s.open, s.cut, s.up,
                   s.down);
}

static int write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Serves one control connection until it closes, goes quiet for 10 s or
 * the proxy is stopped. */
static void serve_control(net_proxy *p, int fd)
{
    char line[256], answer[256];
    size_t have = 0;
    while (!stopping) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, 10000);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return;
        ssize_t n = read(fd, line + have, sizeof line - 1 - have);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        have += (size_t)n;
        char *nl;
        while ((nl = memchr(line, '\n', have)) != NULL) {
            *nl = '\0';
            if (nl > line && nl[-1] == '\r') nl[-1] = '\0';
            run_command(p, line, answer, sizeof answer);
            if (write_all(fd, answer, strlen(answer)) != 0) return;
            have -= (size_t)(nl + 1 - line);
            memmove(line, nl + 1, have);
        }
        if (have == sizeof line - 1) return; /* a line too long to be a command */
    }
}

static int usage(const char *argv0)
{
    (void)fprintf(stderr, "usage: %s [--port N] [--control-port N] UPSTREAM_PORT\n", argv0);
    return 2;
}

int main(int argc, char **argv)
{
    int port = 0, control_port = 0, upstream = 0, c;
    static const struct option longs[] = {{"port", required_argument, NULL, 'p'},
                                          {"control-port", required_argument, NULL, 'c'},
                                          {NULL, 0, NULL, 0}};
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        if (c == 'p' && parse_port(optarg, &port) == 0) continue;
        if (c == 'c' && parse_port(optarg, &control_port) == 0) continue;
        return usage(argv[0]);
    }
    if (optind != argc - 1 || parse_port(argv[optind], &upstream) != 0 || upstream == 0)
        return usage(argv[0]);

    struct sigaction sa = {.sa_handler = on_signal};
    if (sigemptyset(&sa.sa_mask) != 0 || sigaction(SIGTERM, &sa, NULL) != 0 ||
        sigaction(SIGINT, &sa, NULL) != 0) {
        perror("fault_proxy: sigaction");
        return 1;
    }
    net_proxy *p;
    if (net_proxy_open(&p, port, upstream) != 0) {
        (void)fprintf(stderr, "fault_proxy: cannot listen on 127.0.0.1:%d: %s\n", port,
                      strerror(errno));
        return 1;
    }
    int ctl = control_listen(control_port, &control_port);
    if (ctl < 0) {
        (void)fprintf(stderr, "fault_proxy: cannot listen on 127.0.0.1:%d for control: %s\n",
                      control_port, strerror(errno));
        net_proxy_close(p);
        return 1;
    }
    if (printf("fault_proxy: port %d control %d upstream %d\n", net_proxy_port(p), control_port,
               upstream) < 0 ||
        fflush(stdout) != 0) {
        net_proxy_close(p);
        (void)close(ctl);
        return 1;
    }
    while (!stopping) {
        struct pollfd pf = {.fd = ctl, .events = POLLIN};
        /* The signal interrupts the wait; the timeout covers one that came
         * just before it. */
        if (poll(&pf, 1, 500) <= 0) continue;
        int fd = accept(ctl, NULL, NULL);
        if (fd < 0) continue;
        serve_control(p, fd);
        (void)close(fd);
    }
    (void)close(ctl);
    net_proxy_close(p);
    return 0;
}
