/* route_metrics.h — the page `acemq route --metrics` serves. */
#ifndef ACEMQ_CLI_ROUTE_METRICS_H
#define ACEMQ_CLI_ROUTE_METRICS_H

#include "cli/metrics.h"

/* ctx: the acemq__route_file being run. */
void acemq__route_metrics_render(void *ctx, acemq__page *o);

#endif
