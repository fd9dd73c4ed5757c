/* builtin.c — registers the built-in backends in their contracts' registries
 * (core/registry.h calls this once, before the first lookup). The order is
 * the order unknown-scheme messages list them in. */
#include "backends/builtin.h"

#include "core/registry.h"

void acemq__backends_init(void)
{
    /* A fresh registry holds fewer than ACEMQ__REGISTRY_MAX entries, so
     * these cannot fail. */
    (void)acemq__registry_add(&acemq__idem_registry, &acemq__memory_idem_backend.entry);
    (void)acemq__registry_add(&acemq__idem_registry, &acemq__sqlite_idem_backend.entry);
    (void)acemq__registry_add(&acemq__idem_registry, &acemq__pg_idem_backend.entry);
    (void)acemq__registry_add(&acemq__idem_registry, &acemq__pgsql_idem_backend.entry);
    (void)acemq__registry_add(&acemq__idem_registry, &acemq__redis_idem_backend.entry);
    (void)acemq__registry_add(&acemq__outbox_registry, &acemq__sqlite_outbox_backend.entry);
    (void)acemq__registry_add(&acemq__outbox_registry, &acemq__pg_outbox_backend.entry);
    (void)acemq__registry_add(&acemq__outbox_registry, &acemq__pgsql_outbox_backend.entry);
    (void)acemq__registry_add(&acemq__broker_registry, &acemq__amqp_broker_backend.entry);
    (void)acemq__registry_add(&acemq__broker_registry, &acemq__memory_broker_backend.entry);
}
