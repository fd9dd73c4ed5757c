/* key.c — the consumer's key expression: literal text with ${message_id},
 * ${routing_key} and ${header.NAME} substituted ("$$" is a "$"). A part
 * the message lacks (no message_id, no such header, a header that is not a
 * string or an integer) leaves it with no key, which the consumer
 * dead-letters rather than guess.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "acemq/idem.h"
#include "consumer/consumer_internal.h"
#include "core/buf.h"

/* The text of a header's value: a string as it is, an integer in decimal. */
static int put_header(acemq__buf *b, json_t *headers, const char *name, size_t name_len,
                      const char **why)
{
    char key[256];
    if (name_len >= sizeof key) {
        *why = "a header name in the key is longer than 255 bytes";
        return ACEMQ_ENOENT;
    }
    memcpy(key, name, name_len);
    key[name_len] = '\0';
    json_t *v = headers ? json_object_get(headers, key) : NULL;
    if (json_is_string(v)) return acemq__buf_put(b, json_string_value(v), json_string_length(v));
    if (json_is_integer(v)) {
        char num[32];
        int n = snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return acemq__buf_put(b, num, (size_t)n);
    }
    *why = v ? "a header of the key is neither a string nor an integer"
             : "the message lacks a header of the key";
    return ACEMQ_ENOENT;
}

/* Walks expr, calling each part in turn: literal text and ${...} names. With d NULL
 * it only checks the form. */
static int expand(const char *expr, const acemq_delivery *d, acemq__buf *b, const char **why)
{
    json_t *headers = NULL;
    int rc = 0;
    for (const char *p = expr; *p && rc == 0;) {
        if (p[0] == '$' && p[1] == '$') {
            rc = d ? acemq__buf_put(b, "$", 1) : 0;
            p += 2;
            continue;
        }
        if (p[0] != '$') {
            size_t n = strcspn(p, "$");
            rc = d ? acemq__buf_put(b, p, n) : 0;
            p += n;
            continue;
        }
        if (p[1] != '{') {
            *why = "a '$' in the key is neither \"$$\" nor \"${\"";
            rc = ACEMQ_EINVAL;
            break;
        }
        const char *name = p + 2, *end = strchr(name, '}');
        if (!end) {
            *why = "a \"${\" in the key has no '}'";
            rc = ACEMQ_EINVAL;
            break;
        }
        size_t n = (size_t)(end - name);
        p = end + 1;
        if (n == 10 && memcmp(name, "message_id", n) == 0) {
            if (!d) continue;
            if (!d->message_id || d->message_id_len == 0) {
                *why = "the message has no message_id";
                rc = ACEMQ_ENOENT;
            } else {
                rc = acemq__buf_put(b, d->message_id, d->message_id_len);
            }
        } else if (n == 11 && memcmp(name, "routing_key", n) == 0) {
            if (d)
                rc = acemq__buf_put(b, d->routing_key ? d->routing_key : "",
                                    strlen(d->routing_key ? d->routing_key : ""));
        } else if (n > 7 && memcmp(name, "header.", 7) == 0) {
            if (!d) continue;
            if (!headers && d->headers_json) headers = json_loads(d->headers_json, 0, NULL);
            rc = put_header(b, headers, name + 7, n - 7, why);
        } else {
            *why = "the key names something other than message_id, routing_key or header.NAME";
            rc = ACEMQ_EINVAL;
        }
    }
    json_decref(headers);
    return rc;
}

int acemq__consumer_key_check(const char *expr, const char **why)
{
    if (!expr || !*expr) {
        *why = "the key expression is empty";
        return ACEMQ_EINVAL;
    }
    acemq__buf b = {0};
    return expand(expr, NULL, &b, why);
}

int acemq__consumer_key(const char *expr, const acemq_delivery *d, char **out, size_t *len,
                        const char **why)
{
    acemq__buf b = {0};
    *out = NULL;
    *len = 0;
    int rc = expand(expr, d, &b, why);
    if (rc == 0 && b.len == 0) {
        *why = "the key is empty";
        rc = ACEMQ_ENOENT;
    }
    if (rc == 0 && b.len > ACEMQ_IDEM_ID_MAX) {
        *why = "the key is longer than ACEMQ_IDEM_ID_MAX (1024) bytes";
        rc = ACEMQ_ENOENT;
    }
    if (rc == ACEMQ_ENOMEM) *why = "out of memory";
    if (rc != 0) {
        acemq__buf_free(&b);
        return rc;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}
