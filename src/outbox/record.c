/* record.c — what both add functions check before a byte reaches a database.
 *
 * Every limit is checked, and every string proved valid UTF-8, before the
 * INSERT is sent: PostgreSQL aborts the caller's whole transaction on a
 * statement that fails, so a bad record must be refused here, with the
 * transaction untouched. Headers are stored as one JSON object of strings
 * (docs/schema.md), encoded with jansson.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/uuid.h"
#include "outbox/outbox_backend.h"

_Static_assert(ACEMQ__UUID_LEN == ACEMQ_OUTBOX_UUID_LEN, "one length for generated ids");

/* 1 when s[0..len) is well-formed UTF-8 (no overlongs, no surrogates). */
static int utf8_valid(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t n;
        unsigned min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1, min = 0x80, c &= 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2, min = 0x800, c &= 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3, min = 0x10000, c &= 0x07;
        } else {
            return 0;
        }
        if (len - i - 1 < n) return 0;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            c = c << 6 | (s[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
        i += n + 1;
    }
    return 1;
}

/* A field: required or optional, at most max bytes, valid UTF-8. */
static int check_text(const char *what, const char *s, int required, int nonempty, size_t max)
{
    if (!s) {
        if (!required) return 0;
        return acemq__outbox_fail_thread(ACEMQ_EINVAL, "record: %s must not be NULL", what);
    }
    size_t len = strlen(s);
    if (nonempty && len == 0)
        return acemq__outbox_fail_thread(ACEMQ_EINVAL, "record: %s must not be empty", what);
    if (len > max)
        return acemq__outbox_fail_thread(
            ACEMQ_EINVAL, "record: %s is %zu bytes, longer than the %zu allowed", what, len, max);
    if (!utf8_valid((const unsigned char *)s, len))
        return acemq__outbox_fail_thread(ACEMQ_EINVAL, "record: %s is not valid UTF-8", what);
    return 0;
}

static int encode_headers(const acemq_outbox_record *r, char **out)
{
    *out = NULL;
    if (r->n_headers == 0) return 0;
    json_t *obj = json_object();
    if (!obj) return acemq__outbox_fail_thread(ACEMQ_ENOMEM, "out of memory encoding headers");
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < r->n_headers; i++) {
        const acemq_outbox_header *hd = &r->headers[i];
        rc = check_text("a header name", hd->name, 1, 1, ACEMQ_OUTBOX_HEADER_MAX);
        if (rc == 0) rc = check_text("a header value", hd->value, 1, 0, ACEMQ_OUTBOX_HEADER_MAX);
        if (rc == 0 && json_object_get(obj, hd->name))
            rc = acemq__outbox_fail_thread(ACEMQ_EINVAL, "record: header '%s' is given twice",
                                           hd->name);
        if (rc == 0 && json_object_set_new(obj, hd->name, json_string(hd->value)) != 0)
            rc = acemq__outbox_fail_thread(ACEMQ_ENOMEM, "out of memory encoding headers");
    }
    if (rc == 0) {
        *out = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!*out) rc = acemq__outbox_fail_thread(ACEMQ_ENOMEM, "out of memory encoding headers");
    }
    json_decref(obj);
    return rc;
}

int acemq__outbox_prepare_record(const acemq_outbox_record *r, const acemq_outbox_add_options *o,
                                 char id_buf[ACEMQ_OUTBOX_ID_MAX + 1], char **headers_json)
{
    *headers_json = NULL;
    if (!r) return acemq__outbox_fail_thread(ACEMQ_EINVAL, "record must not be NULL");
    size_t max_body = o && o->max_body ? o->max_body : ACEMQ_OUTBOX_DEFAULT_MAX_BODY;
    int rc = check_text("id", r->id, 0, 1, ACEMQ_OUTBOX_ID_MAX);
    if (rc == 0) rc = check_text("destination", r->destination, 1, 0, ACEMQ_OUTBOX_NAME_MAX);
    if (rc == 0) rc = check_text("routing_key", r->routing_key, 1, 0, ACEMQ_OUTBOX_NAME_MAX);
    if (rc == 0) rc = check_text("ordering_key", r->ordering_key, 0, 1, ACEMQ_OUTBOX_NAME_MAX);
    if (rc == 0) rc = check_text("content_type", r->content_type, 0, 0, ACEMQ_OUTBOX_NAME_MAX);
    if (rc != 0) return rc;
    if (!r->body && r->body_len)
        return acemq__outbox_fail_thread(ACEMQ_EINVAL, "record: body is NULL but body_len is %zu",
                                         r->body_len);
    if (r->body_len > max_body)
        return acemq__outbox_fail_thread(ACEMQ_ERANGE,
                                         "record: body is %zu bytes, over the maximum of %zu",
                                         r->body_len, max_body);
    if (r->n_headers && !r->headers)
        return acemq__outbox_fail_thread(
            ACEMQ_EINVAL, "record: headers is NULL but n_headers is %zu", r->n_headers);
    if (r->n_headers > ACEMQ_OUTBOX_HEADERS_MAX)
        return acemq__outbox_fail_thread(ACEMQ_EINVAL,
                                         "record: %zu headers, more than the %d allowed",
                                         r->n_headers, ACEMQ_OUTBOX_HEADERS_MAX);
    if (r->id) {
        memcpy(id_buf, r->id, strlen(r->id) + 1);
    } else {
        rc = acemq_uuid7(id_buf);
        if (rc != 0) return acemq__outbox_fail_thread(rc, "could not draw random bytes for a UUID");
    }
    return encode_headers(r, headers_json);
}
