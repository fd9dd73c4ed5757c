/* consumer_view.c — the consumer's readers of a delivery, run for the fuzz
 * targets; see consumer_view.h. */
#include "consumer_view.h"

#include <stdlib.h>

#include <jansson.h>

#include "acemq/idem.h"
#include "consumer/consumer_internal.h"

void fuzz_consumer_view(const acemq_delivery *d)
{
    static const char *const keys[] = {"${message_id}", "${header.trace}",
                                       "${routing_key}:${header.x-acemq-attempts}",
                                       "order-${header.order_id}-$$", "${header.x-death}"};
    int failures = acemq__consumer_failures_of(d);
    if (failures < 0 || failures > 1000000) abort();
    free(acemq__consumer_error_of(d));
    acemq_delivery view;
    json_t *held = acemq__consumer_as_published(d, &view);
    if (!view.routing_key || !view.exchange) abort();
    json_decref(held);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char *key = NULL;
        size_t len = 0;
        const char *why = NULL;
        int rc = acemq__consumer_key(keys[i], d, &key, &len, &why);
        if (rc == 0 && (!key || len == 0 || len > ACEMQ_IDEM_ID_MAX)) abort();
        if (rc != 0 && (key || !why)) abort();
        free(key);
    }
}
