/* fiu_net.h — a socket call that libfiu failed becomes a lost connection.
 *
 * libfiu fails send or recv without touching the socket: the connection
 * stays up and the peer never hears of it. A failure that the injected
 * ECONNRESET or EPIPE stands for leaves the socket dead, and libraries rely
 * on that: libpq, after a failed send, discards what it could not send and
 * waits to read the server's last words, which only a dead socket answers
 * (EOF); on a live one the server waits for the query and libpq for its
 * reply, forever. So a test linked with fiu_net.c defines send, recv, read
 * and write itself (the program's own definitions come before every
 * library's, the preload's included): each calls on to the next definition
 * (libfiu's wrapper) and, when the call failed by injection on a socket,
 * shuts the socket down both ways, as a reset would have; the peer sees
 * the connection end. Calls that did not fail, or failed by themselves,
 * are untouched.
 *
 * rabbitmq-c and libpq use send and recv on their sockets, hiredis read and
 * write; sendto, sendmsg, recvfrom and recvmsg are not used by them and are
 * not wrapped here.
 */
#ifndef FIU_NET_H
#define FIU_NET_H

/* Sockets shut down so far: one per injected failure on a socket. */
long fiu_net_resets(void);

#endif
