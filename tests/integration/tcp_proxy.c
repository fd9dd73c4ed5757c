/* tcp_proxy.c — the cmocka tests' face of the loopback proxy (net_proxy.c):
 * one proxy per process, and a call the system refuses fails the running
 * test (tcp_proxy.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/net_proxy.h"
#include "integration/tcp_proxy.h"

static net_proxy *px;

void tcp_proxy_start(int upstream_port)
{
    assert_int_equal(net_proxy_open(&px, 0, upstream_port), 0);
}

void tcp_proxy_stop(void)
{
    net_proxy_close(px);
    px = NULL;
}

void tcp_proxy_cut(void)
{
    (void)net_proxy_cut(px, 0);
}

void tcp_proxy_freeze(int frozen)
{
    net_proxy_set_mode(px, frozen ? NET_PROXY_STALL : NET_PROXY_PASS);
}

int tcp_proxy_port(void)
{
    return net_proxy_port(px);
}
