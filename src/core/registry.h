/* registry.h — the tables in which backends register under a URL scheme and
 * in which their contract finds them (SQLite's sqlite3_vfs_register and
 * sqlite3_vfs_find are the model).
 *
 * Each contract (idem, outbox, broker) keeps one acemq__registry of its own
 * backend type, whose first member is an acemq__registry_entry. A contract
 * only ever looks a scheme up: it names no backend and includes no backend
 * header. The built-in backends are registered once, on the first add or
 * find of any registry, by acemq__backends_init, which the backends layer
 * defines (src/backends/builtin.c), as sqlite3_initialize calls the
 * sqlite3_os_init that the OS layer defines.
 */
#ifndef ACEMQ_CORE_REGISTRY_H
#define ACEMQ_CORE_REGISTRY_H

#include <stddef.h>

#define ACEMQ__REGISTRY_MAX 16

typedef struct acemq__registry_entry {
    const char *scheme; /* what precedes ':' in the URLs the backend serves */
    const char *shown;  /* how unknown-scheme messages list it ("postgres://");
                           NULL: an alias, not listed */
} acemq__registry_entry;

/* Zero-initialised (static storage) before first use. */
typedef struct acemq__registry {
    size_t n;
    const acemq__registry_entry *at[ACEMQ__REGISTRY_MAX];
} acemq__registry;

/* Registers e (static storage), replacing an entry with the same scheme.
 * 0, or ACEMQ_ENOMEM when the table is full. Thread-safe. */
int acemq__registry_add(acemq__registry *r, const acemq__registry_entry *e);
/* The entry registered under scheme, or NULL. Thread-safe. */
const acemq__registry_entry *acemq__registry_find(acemq__registry *r, const char *scheme);
/* Writes the listed entries' `shown`, in registration order, as
 * "memory:, sqlite:" into buf (cut to cap). */
void acemq__registry_names(acemq__registry *r, char *buf, size_t cap);

/* Registers every built-in backend in its contract's registry. Defined by
 * the backends layer; called once, by the first add or find. */
void acemq__backends_init(void);

#endif
