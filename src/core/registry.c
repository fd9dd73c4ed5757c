/* registry.c — scheme tables for pluggable backends; see registry.h. */
#include "core/registry.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "acemq/common.h"

/* One lock for every registry: registration is rare and lookups happen once
 * per open. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;

/* Set on the thread that runs acemq__backends_init, whose own adds must not
 * wait for the once they run inside. */
static _Thread_local int initialising;

static void run_init(void)
{
    initialising = 1;
    acemq__backends_init();
    initialising = 0;
}

static void add_builtins(void)
{
    if (!initialising) pthread_once(&builtins_once, run_init);
}

static size_t index_of(const acemq__registry *r, const char *scheme)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->at[i]->scheme, scheme) == 0) return i;
    return r->n;
}

int acemq__registry_add(acemq__registry *r, const acemq__registry_entry *e)
{
    add_builtins();
    int rc = 0;
    pthread_mutex_lock(&lock);
    size_t i = index_of(r, e->scheme);
    if (i < r->n)
        r->at[i] = e;
    else if (r->n < ACEMQ__REGISTRY_MAX)
        r->at[r->n++] = e;
    else
        rc = ACEMQ_ENOMEM;
    pthread_mutex_unlock(&lock);
    return rc;
}

const acemq__registry_entry *acemq__registry_find(acemq__registry *r, const char *scheme)
{
    add_builtins();
    pthread_mutex_lock(&lock);
    size_t i = index_of(r, scheme);
    const acemq__registry_entry *e = i < r->n ? r->at[i] : NULL;
    pthread_mutex_unlock(&lock);
    return e;
}

void acemq__registry_names(acemq__registry *r, char *buf, size_t cap)
{
    add_builtins();
    if (cap == 0) return;
    buf[0] = '\0';
    size_t len = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < r->n && len < cap; i++) {
        if (!r->at[i]->shown) continue;
        int w = snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", r->at[i]->shown);
        if (w < 0) break;
        len += (size_t)w;
    }
    pthread_mutex_unlock(&lock);
}
