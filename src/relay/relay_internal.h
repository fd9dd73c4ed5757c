/* relay_internal.h — the relay's state, shared by relay.c (running) and
 * relay_open.c (opening and freeing), and what tests reach inside a relay
 * and users do not: the outbox handles it runs its threads on. A test
 * watches or replaces a handle's methods through its slot, between opening
 * the relay and run(); whatever is in the slots of a relay from
 * acemq_relay_open when it is freed is closed, so a test puts the relay's
 * own handle back first.
 */
#ifndef ACEMQ_RELAY_INTERNAL_H
#define ACEMQ_RELAY_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "acemq/broker.h"
#include "acemq/outbox.h"
#include "acemq/relay.h"
#include "relay/flight.h"
#include "relay/mark_job.h"
#include "relay/waves.h"

struct acemq_relay {
    acemq_outbox *ob;       /* the main thread's: claims (without a claimer), marks, waits */
    acemq_outbox *mark_ob;  /* the marker thread's, or NULL: run() then steps */
    acemq_outbox *claim_ob; /* the claimer thread's, or NULL */
    acemq_outbox *gauge_ob; /* the gauge thread's, or NULL: counted between batches */
    int owns_outboxes;      /* acemq_relay_open: free closes the four */
    acemq_broker *b;
    acemq_relay_options opts;
    acemq_broker_msg *msgs;
    acemq_publish_result *results;
    acemq__mark_job jobs[3];   /* step(): jobs[0]; run(): 0-1 the marker's, 2 inline */
    acemq__flight flights[3];  /* run() with a marker: claimed, sent, pending */
    acemq__waves waves;        /* a batch with several records of a key; main thread */
    int pending;               /* the flight sent and not yet collected; -1 none */
    atomic_int stop_requested; /* acemq_relay_stop, from any thread */
    pthread_mutex_t db_turn;   /* held by a claim or a mark (relay.c) */
    pthread_mutex_t lock;
    acemq_relay_stats stats;
    char errmsg[512];
};

typedef enum acemq__relay_handle {
    ACEMQ__RELAY_MAIN,  /* claims without a claimer, marks of step(), waits */
    ACEMQ__RELAY_MARK,  /* the marker thread's; NULL with one handle */
    ACEMQ__RELAY_CLAIM, /* the claimer thread's; NULL with one handle */
    ACEMQ__RELAY_GAUGE  /* the gauge thread's; NULL with one handle */
} acemq__relay_handle;

/* Where r keeps the handle `which`. */
acemq_outbox **acemq__relay_outbox_slot(acemq_relay *r, acemq__relay_handle which);

#endif
