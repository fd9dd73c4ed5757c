/* tcp_proxy.h — a TCP proxy in the test's process between a client and a
 * broker on 127.0.0.1, for faults that must not touch the shared broker: a
 * cut (every proxied connection closed at once) and a freeze (nothing
 * forwarded either way, as from a broker gone silent). One proxy per
 * process; its calls fail the running cmocka test when the system refuses. */
#ifndef ACEMQ_TEST_TCP_PROXY_H
#define ACEMQ_TEST_TCP_PROXY_H

/* Listens on an ephemeral loopback port (tcp_proxy_port) and forwards each
 * connection to 127.0.0.1:upstream_port, from a thread of its own. */
void tcp_proxy_start(int upstream_port);
/* Stops the thread and closes every socket. */
void tcp_proxy_stop(void);
/* Closes every proxied connection, and returns once it is done. */
void tcp_proxy_cut(void);
/* 1: forward nothing from now on (connections stay open); 0: forward again. */
void tcp_proxy_freeze(int frozen);
int tcp_proxy_port(void);

#endif
