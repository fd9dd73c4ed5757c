/* relay_metrics.h — the relay's metrics page (relay_metrics.c). */
#ifndef ACEMQ_CLI_RELAY_METRICS_H
#define ACEMQ_CLI_RELAY_METRICS_H

#include <acemq/broker.h>
#include <acemq/relay.h>

#include "cli/metrics.h"

typedef struct acemq__relay_metrics_ctx {
    acemq_relay *relay;
    const acemq_broker *broker;
} acemq__relay_metrics_ctx;

/* An acemq__page_render; ctx is an acemq__relay_metrics_ctx. */
void acemq__relay_metrics_render(void *ctx, acemq__page *o);

#endif
