/* consumer_view.h — what the fuzz targets that make deliveries check on
 * each: the consumer's readers of a delivery's headers (failures, error,
 * the as-published view, key expressions) answer within their documented
 * ranges, whatever the headers hold. Aborts otherwise. */
#ifndef ACEMQ_FUZZ_CONSUMER_VIEW_H
#define ACEMQ_FUZZ_CONSUMER_VIEW_H

#include "acemq/broker.h"

void fuzz_consumer_view(const acemq_delivery *d);

#endif
