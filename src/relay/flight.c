/* flight.c — see flight.h. Buffers grow and are kept: a relay refills the
 * same two flights over and over, so a steady run allocates nothing. */
#include <stdlib.h>
#include <string.h>

#include "relay/flight.h"

static size_t text_size(const char *s)
{
    return s ? strlen(s) + 1 : 0;
}

/* Bytes that one record's strings and body take in text. */
static size_t record_size(const acemq_outbox_msg *m)
{
    return text_size(m->id) + text_size(m->destination) + text_size(m->routing_key) +
           text_size(m->ordering_key) + text_size(m->headers_json) + text_size(m->content_type) +
           m->body_len;
}

static int reserve(acemq__flight *f, size_t n, size_t bytes)
{
    if (n > f->cap) {
        acemq_outbox_msg *r = realloc(f->recs, n * sizeof *r);
        if (r) f->recs = r;
        acemq_broker_msg *m = realloc(f->msgs, n * sizeof *m);
        if (m) f->msgs = m;
        acemq_publish_result *res = realloc(f->results, n * sizeof *res);
        if (res) f->results = res;
        if (!r || !m || !res) return ACEMQ_ENOMEM;
        f->cap = n;
    }
    if (bytes > f->text_cap) {
        char *t = realloc(f->text, bytes);
        if (!t) return ACEMQ_ENOMEM;
        f->text = t;
        f->text_cap = bytes;
    }
    return 0;
}

/* Copies s to *at and returns the copy (NULL stays NULL). */
static const char *put(char **at, const char *s)
{
    if (!s) return NULL;
    size_t len = strlen(s) + 1;
    char *copy = memcpy(*at, s, len);
    *at += len;
    return copy;
}

int acemq__flight_fill(acemq__flight *f, const acemq_outbox_msg *m, size_t n)
{
    f->n = 0;
    size_t bytes = 1;
    for (size_t i = 0; i < n; i++)
        bytes += record_size(&m[i]);
    if (reserve(f, n ? n : 1, bytes) != 0) return ACEMQ_ENOMEM;
    char *at = f->text;
    for (size_t i = 0; i < n; i++) {
        acemq_outbox_msg *r = &f->recs[i];
        *r = m[i];
        r->id = put(&at, m[i].id);
        r->destination = put(&at, m[i].destination);
        r->routing_key = put(&at, m[i].routing_key);
        r->ordering_key = put(&at, m[i].ordering_key);
        r->headers_json = put(&at, m[i].headers_json);
        r->content_type = put(&at, m[i].content_type);
        r->last_error = NULL; /* not copied: the relay does not read it */
        r->body = m[i].body_len ? memcpy(at, m[i].body, m[i].body_len) : NULL;
        at += m[i].body_len;
        f->msgs[i] = (acemq_broker_msg){.exchange = r->destination,
                                        .routing_key = r->routing_key,
                                        .message_id = r->id,
                                        .content_type = r->content_type,
                                        .headers_json = r->headers_json,
                                        .attempts = r->attempts,
                                        .body = r->body,
                                        .body_len = r->body_len};
    }
    f->n = n;
    return 0;
}

void acemq__flight_free(acemq__flight *f)
{
    free(f->recs);
    free(f->msgs);
    free(f->results);
    free(f->text);
    memset(f, 0, sizeof *f);
}
