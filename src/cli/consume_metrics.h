/* consume_metrics.h — the consumer's metrics page (consume_metrics.c). */
#ifndef ACEMQ_CLI_CONSUME_METRICS_H
#define ACEMQ_CLI_CONSUME_METRICS_H

#include "cli/metrics.h"

/* An acemq__page_render; ctx is the acemq_consumer. */
void acemq__consume_metrics_render(void *ctx, acemq__page *o);

#endif
