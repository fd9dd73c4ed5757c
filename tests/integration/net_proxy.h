/* net_proxy.h — a TCP proxy on loopback between clients and a broker on
 * 127.0.0.1, run by a thread of its own, that makes network faults without
 * touching the shared broker: a cut (every connection closed, with a FIN or
 * an RST), a stall (nothing forwarded either way, connections left open, as
 * from packets silently dropped) and a hold (the client's bytes forwarded,
 * the broker's replies held back). Used by the cmocka tests (tcp_proxy.c)
 * and by the fault suite's standalone proxy (tests/fault/fault_proxy.c).
 * Calls return 0 or -1 with errno set; none of them fails a test itself. */
#ifndef ACEMQ_TEST_NET_PROXY_H
#define ACEMQ_TEST_NET_PROXY_H

/* What happens to the bytes of every connection, current and new. Stalled
 * and held bytes are not read: they wait in the kernel's buffers, as a
 * dropped packet waits for its retransmission, and flow on once the mode is
 * back to pass (unless a side has given up and closed meanwhile). */
enum net_proxy_mode {
    NET_PROXY_PASS,  /* forward both ways */
    NET_PROXY_STALL, /* forward nothing, notice nothing: only heartbeats tell */
    NET_PROXY_HOLD   /* client -> broker forwarded; broker -> client held */
};

struct net_proxy_stats {
    long accepted;      /* connections taken since the start */
    long open;          /* connections now proxied */
    long cut;           /* connections closed by net_proxy_cut */
    long long up, down; /* bytes forwarded to the broker, to the clients */
};

typedef struct net_proxy net_proxy;

/* Listens on 127.0.0.1:listen_port (0: an ephemeral port, see
 * net_proxy_port) and forwards each connection to 127.0.0.1:upstream_port,
 * from a thread it starts; the mode starts as pass. */
int net_proxy_open(net_proxy **out, int listen_port, int upstream_port);
/* Stops the thread and closes every socket; NULL is accepted. */
void net_proxy_close(net_proxy *p);
int net_proxy_port(const net_proxy *p);
/* Returns once the proxy's thread works by the new mode: from then on no
 * byte moves by the old one. */
void net_proxy_set_mode(net_proxy *p, enum net_proxy_mode mode);
enum net_proxy_mode net_proxy_get_mode(net_proxy *p);
const char *net_proxy_mode_name(enum net_proxy_mode mode);
/* Closes every current connection on both sides, and returns once that is
 * done: with rst, by an RST (SO_LINGER 0: the peers read ECONNRESET), else
 * by a FIN. The mode stays; connections made afterwards are proxied as
 * usual. Answers how many connections were closed. */
int net_proxy_cut(net_proxy *p, int rst);
void net_proxy_get_stats(net_proxy *p, struct net_proxy_stats *s);

#endif
