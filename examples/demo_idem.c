/* demo_idem.c — the idempotency store absorbing redeliveries, on SQLite.
 *
 * A consumer handles "charge card" messages from an at-least-once broker. The
 * broker redelivers: after a crash, after a lost ack, to a second consumer
 * while the first is still busy. The store makes each charge happen once.
 * Time is a manual clock so the run is the same every time. Exits non-zero if
 * any message was charged other than exactly once. Usage: acemq-demo [DB]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acemq/acemq.h"

#define LEASE_MS 30000

static int charges[8]; /* how often each order's card was charged: must end at 1 */
static int failures;

typedef struct consumer {
    const char *name;
    acemq_idem *store;
} consumer;

static int order_no(const char *msg_id)
{
    return atoi(strchr(msg_id, '-') + 1);
}

static void check(int ok, const char *what)
{
    if (!ok) {
        printf("  !! unexpected: %s\n", what);
        failures++;
    }
}

/* What a consumer does with one delivery; `hang` stops it after the claim,
 * mid-handler, before its charge commits (a stalled process, or one about to
 * be killed). Returns try_claim's answer. */
static int deliver(consumer *c, const char *msg_id, int hang, uint64_t *token_out)
{
    acemq_claim claim;
    int rc = acemq_idem_try_claim(c->store, msg_id, strlen(msg_id), NULL, &claim);
    const char *verdict;
    switch (rc) {
    case ACEMQ_CLAIMED:
        if (token_out) *token_out = claim.token;
        if (hang) {
            verdict = "claimed, then HUNG mid-handler: nothing committed, no confirm, no ack";
            break;
        }
        charges[order_no(msg_id)]++;
        if (acemq_idem_confirm(c->store, msg_id, strlen(msg_id), claim.token) != 0) {
            printf("  confirm failed: %s\n", acemq_idem_errmsg(c->store));
            failures++;
        }
        verdict = claim.takeover ? "took over an expired lease, charged card, confirmed, ack"
                                 : "claimed, charged card, confirmed, ack";
        break;
    case ACEMQ_ALREADY_CONFIRMED:
        verdict = "ALREADY_CONFIRMED: duplicate, ack without charging";
        break;
    case ACEMQ_IN_PROGRESS:
        verdict = "IN_PROGRESS: someone holds it, requeue (no ack)";
        break;
    default:
        printf("  %-10s %-9s error %s: %s\n", c->name, msg_id, acemq_err_name(rc),
               acemq_idem_errmsg(c->store));
        failures++;
        return rc;
    }
    printf("  %-10s %-9s %s\n", c->name, msg_id, verdict);
    return rc;
}

static acemq_idem *open_store(const char *url, acemq_manual_clock *clock)
{
    acemq_idem_options o;
    acemq_idem_options_init(&o);
    o.clock = acemq_manual_clock_get(clock);
    o.lease_ms = LEASE_MS;
    acemq_idem *h = NULL;
    int rc = acemq_idem_open(&h, url, &o);
    if (rc != 0) {
        fprintf(stderr, "acemq-demo: cannot open %s: %s\n", url, acemq_strerror(rc));
        exit(1);
    }
    return h;
}

int main(int argc, char **argv)
{
    char dir[] = "/tmp/acemq-demo-XXXXXX";
    char path[256], url[300];
    if (argc > 1) {
        snprintf(path, sizeof path, "%s", argv[1]);
    } else {
        if (!mkdtemp(dir)) {
            perror("acemq-demo: mkdtemp");
            return 1;
        }
        snprintf(path, sizeof path, "%s/idem.db", dir);
    }
    snprintf(url, sizeof url, "sqlite:%s", path);

    acemq_manual_clock *clock = NULL;
    if (acemq_manual_clock_new(&clock, 1700000000000LL) != 0) return 1;
    consumer a = {"worker-A", open_store(url, clock)};
    consumer b = {"worker-B", open_store(url, clock)};
    printf("acemq %s idempotency store demo on %s (lease %d s)\n\n", acemq_version(), url,
           LEASE_MS / 1000);

    printf("1. First deliveries: each order charged once.\n");
    for (int i = 1; i <= 4; i++) {
        char id[16];
        snprintf(id, sizeof id, "order-%d", i);
        check(deliver(&a, id, 0, NULL) == ACEMQ_CLAIMED, "a new message is claimed");
    }

    printf("\n2. The ack for order-2 was lost: the broker redelivers it to worker-B.\n");
    check(deliver(&b, "order-2", 0, NULL) == ACEMQ_ALREADY_CONFIRMED, "a duplicate is recognised");

    printf("\n3. worker-A takes order-5 and hangs before its work commits.\n");
    uint64_t dead_token = 0;
    deliver(&a, "order-5", 1, &dead_token);
    printf("   The broker redelivers order-5 to worker-B at once:\n");
    check(deliver(&b, "order-5", 0, NULL) == ACEMQ_IN_PROGRESS, "a held claim is in progress");
    printf("   %d s later worker-A's lease has run out; the next redelivery:\n", LEASE_MS / 1000);
    acemq_manual_clock_advance(clock, LEASE_MS);
    check(deliver(&b, "order-5", 0, NULL) == ACEMQ_CLAIMED, "an expired lease is taken over");

    printf("\n4. worker-A comes back to life and tries to confirm order-5:\n");
    int rc = acemq_idem_confirm(a.store, "order-5", 7, dead_token);
    printf("  %-10s %-9s confirm with its old token -> %s\n", a.name, "order-5",
           acemq_err_name(rc));
    check(rc == ACEMQ_ESTALE, "a stale token is refused");
    printf("   refused, so worker-A rolls its work back: worker-B's charge stands alone.\n");

    printf("\n5. Both workers restart; the store is a file, so it remembers.\n");
    acemq_idem_close(a.store);
    acemq_idem_close(b.store);
    a.store = open_store(url, clock);
    for (int i = 1; i <= 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "order-%d", i);
        check(deliver(&a, id, 0, NULL) == ACEMQ_ALREADY_CONFIRMED, "confirmed ids survive");
    }

    acemq_idem_stats s;
    acemq_idem_stats_get(a.store, &s);
    printf("\n%-8s %s\n", "order", "times charged");
    for (int i = 1; i <= 5; i++) {
        printf("%-8d %d\n", i, charges[i]);
        check(charges[i] == 1, "each order charged exactly once");
    }
    printf("\nafter restart, worker-A saw %llu duplicates, claimed %llu\n",
           (unsigned long long)s.duplicates, (unsigned long long)s.claimed);
    acemq_idem_close(a.store);
    acemq_manual_clock_free(clock);
    if (argc <= 1) {
        static const char *const suffix[] = {"", "-wal", "-shm", "-acemq-issue"};
        for (int i = 0; i < 4; i++) {
            char f[300];
            snprintf(f, sizeof f, "%s%s", path, suffix[i]);
            (void)unlink(f);
        }
        (void)rmdir(dir);
    }
    printf("\n%s\n", failures ? "DEMO FAILED" : "every order charged exactly once: OK");
    return failures ? 1 : 0;
}
