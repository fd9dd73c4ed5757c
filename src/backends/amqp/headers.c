/* headers.c — a delivery's AMQP headers (a field table) as one JSON object,
 * and the attempt count publish put among them. Every field type AMQP
 * 0-9-1 has is carried (include/acemq/broker.h says how): a consumer picks
 * keys and passes headers on without knowing the wire format, and RabbitMQ's
 * own headers (x-death: an array of tables with timestamps) come through
 * whole.
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>
#include <jansson.h>

#include "backends/amqp/amqp_self.h"

/* Deeper nesting than this is carried as a string: a broker's headers never
 * nest so far, and the recursion stays bounded whatever arrives. */
#define MAX_DEPTH 16

/* The length of the valid UTF-8 sequence at p (at most n bytes), or 0; a
 * NUL counts as invalid (text() says why). */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    size_t len;
    uint32_t c;
    if (p[0] < 0x80) return p[0] != 0;
    if (p[0] >= 0xC2 && p[0] <= 0xDF)
        len = 2, c = p[0] & 0x1F;
    else if (p[0] >= 0xE0 && p[0] <= 0xEF)
        len = 3, c = p[0] & 0x0F;
    else if (p[0] >= 0xF0 && p[0] <= 0xF4)
        len = 4, c = p[0] & 0x07;
    else
        return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        c = c << 6 | (p[i] & 0x3F);
    }
    /* Overlong forms, surrogates and past U+10FFFF are not UTF-8. */
    if ((len == 3 && c < 0x800) || (len == 4 && c < 0x10000) || c > 0x10FFFF ||
        (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    return len;
}

/* bytes as a JSON string, each byte that starts no valid UTF-8 sequence
 * and each NUL replaced by U+FFFD. A NUL is valid UTF-8 and jansson would
 * take it, but the consumer's readers of headers_json (json_loads without
 * JSON_ALLOW_NUL, C strings) would then lose every header of the message:
 * its failure count and error, the keys taken from it. NULL when out of
 * memory. */
static json_t *text(amqp_bytes_t b)
{
    const unsigned char *p = b.bytes;
    if (b.len == 0) return json_string("");
    /* json_stringn refuses what is not UTF-8 */
    json_t *j = memchr(p, '\0', b.len) ? NULL : json_stringn((const char *)p, b.len);
    if (j) return j;
    char *clean = malloc(b.len * 3 + 1);
    if (!clean) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < b.len;) {
        size_t n = utf8_seq(p + i, b.len - i);
        if (n) {
            memcpy(clean + o, p + i, n);
            o += n;
            i += n;
        } else {
            clean[o++] = (char)0xEF; /* U+FFFD */
            clean[o++] = (char)0xBF;
            clean[o++] = (char)0xBD;
            i++;
        }
    }
    j = json_stringn(clean, o);
    free(clean);
    return j;
}

static json_t *table_json(const amqp_table_t *t, int depth);

static json_t *real(double d)
{
    if (isnan(d)) return json_string("NaN");
    if (isinf(d)) return json_string(d > 0 ? "Infinity" : "-Infinity");
    return json_real(d);
}

/* A decimal (value scaled down by 10^decimals) as its digits: "12.34",
 * "0.05", "-7.5". AMQP 0-9-1 (4.2.5.5) makes the value a signed 32-bit
 * integer, as the Java client and pika write it; rabbitmq-c's type is
 * unsigned, so the bits are read back as two's complement. */
static json_t *decimal(amqp_decimal_t v)
{
    char digits[16], out[300];
    int64_t value = v.value > INT32_MAX ? (int64_t)v.value - ((int64_t)1 << 32) : v.value;
    int o = 0;
    if (value < 0) out[o++] = '-';
    int n = snprintf(digits, sizeof digits, "%" PRIu64, (uint64_t)(value < 0 ? -value : value));
    int dec = v.decimals;
    if (dec >= n) { /* all behind the point: "0.", then zeros */
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < dec - n; i++)
            out[o++] = '0';
    }
    for (int i = 0; i < n; i++) {
        if (dec > 0 && dec < n && i == n - dec) out[o++] = '.';
        out[o++] = digits[i];
    }
    out[o] = '\0';
    return json_string(out);
}

static json_t *field_json(const amqp_field_value_t *v, int depth)
{
    char buf[64];
    switch (v->kind) {
    case AMQP_FIELD_KIND_BOOLEAN:
        return json_boolean(v->value.boolean);
    case AMQP_FIELD_KIND_I8:
        return json_integer(v->value.i8);
    case AMQP_FIELD_KIND_U8:
        return json_integer(v->value.u8);
    case AMQP_FIELD_KIND_I16:
        return json_integer(v->value.i16);
    case AMQP_FIELD_KIND_U16:
        return json_integer(v->value.u16);
    case AMQP_FIELD_KIND_I32:
        return json_integer(v->value.i32);
    case AMQP_FIELD_KIND_U32:
        return json_integer(v->value.u32);
    case AMQP_FIELD_KIND_I64:
        return json_integer(v->value.i64);
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP:
        if (v->value.u64 <= (uint64_t)LLONG_MAX) return json_integer((json_int_t)v->value.u64);
        (void)snprintf(buf, sizeof buf, "%" PRIu64, v->value.u64);
        return json_string(buf);
    case AMQP_FIELD_KIND_F32:
        return real(v->value.f32);
    case AMQP_FIELD_KIND_F64:
        return real(v->value.f64);
    case AMQP_FIELD_KIND_DECIMAL:
        return decimal(v->value.decimal);
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
        return text(v->value.bytes);
    case AMQP_FIELD_KIND_VOID:
        return json_null();
    case AMQP_FIELD_KIND_ARRAY: {
        if (depth >= MAX_DEPTH) return json_string("(nested too deep)");
        json_t *a = json_array();
        for (int i = 0; a && i < v->value.array.num_entries; i++) {
            json_t *e = field_json(&v->value.array.entries[i], depth + 1);
            if (!e || json_array_append_new(a, e) != 0) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    case AMQP_FIELD_KIND_TABLE:
        if (depth >= MAX_DEPTH) return json_string("(nested too deep)");
        return table_json(&v->value.table, depth + 1);
    default:
        (void)snprintf(buf, sizeof buf, "(field type '%c')", (char)v->kind);
        return json_string(buf);
    }
}

static json_t *table_json(const amqp_table_t *t, int depth)
{
    json_t *o = json_object();
    for (int i = 0; o && i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        json_t *key = text(e->key); /* keys as text too, NUL-terminated by jansson */
        json_t *val = key ? field_json(&e->value, depth) : NULL;
        int bad = !key || !val || json_object_set_new(o, json_string_value(key), val) != 0;
        json_decref(key);
        if (bad) { /* json_object_set_new took val even when it failed */
            json_decref(o);
            o = NULL;
        }
    }
    return o;
}

/* An integer field as an attempt count, saturated at INT_MAX; 0 for a
 * negative one and for any other kind. */
static int int_value(const amqp_field_value_t *v)
{
    long long x;
    switch (v->kind) {
    case AMQP_FIELD_KIND_I8:
        /* NOLINTNEXTLINE(bugprone-signed-char-misuse): a signed 8-bit number, sign intended */
        x = v->value.i8;
        break;
    case AMQP_FIELD_KIND_U8:
        x = v->value.u8;
        break;
    case AMQP_FIELD_KIND_I16:
        x = v->value.i16;
        break;
    case AMQP_FIELD_KIND_U16:
        x = v->value.u16;
        break;
    case AMQP_FIELD_KIND_I32:
        x = v->value.i32;
        break;
    case AMQP_FIELD_KIND_U32:
        x = v->value.u32;
        break;
    case AMQP_FIELD_KIND_I64:
        x = v->value.i64;
        break;
    case AMQP_FIELD_KIND_U64:
        x = v->value.u64 > INT_MAX ? INT_MAX : (long long)v->value.u64;
        break;
    default:
        return 0;
    }
    /* A count below zero means nothing: none yet, as without the header. */
    return x > INT_MAX ? INT_MAX : x < 0 ? 0 : (int)x;
}

int acemq__amqp_headers_json(const amqp_table_t *t, char **json, int *attempts)
{
    *json = NULL;
    *attempts = 0;
    for (int i = 0; i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        if (e->key.len == strlen(ATTEMPTS_HEADER) &&
            memcmp(e->key.bytes, ATTEMPTS_HEADER, e->key.len) == 0)
            *attempts = int_value(&e->value);
    }
    json_t *o = table_json(t, 0);
    if (!o) return ACEMQ_ENOMEM;
    *json = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return *json ? 0 : ACEMQ_ENOMEM;
}

int acemq__amqp_props_parts(const amqp_basic_properties_t *p, acemq__delivery_parts *parts,
                            char **headers)
{
    *headers = NULL;
    int attempts = 0;
    if ((p->_flags & AMQP_BASIC_HEADERS_FLAG) &&
        acemq__amqp_headers_json(&p->headers, headers, &attempts) != 0)
        return ACEMQ_ENOMEM;
    int has_id = (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0;
    int has_type = (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG) != 0;
    parts->message_id = has_id ? p->message_id.bytes : NULL;
    parts->message_id_len = has_id ? p->message_id.len : 0;
    parts->content_type = has_type ? p->content_type.bytes : NULL;
    parts->content_type_len = has_type ? p->content_type.len : 0;
    parts->headers_json = *headers;
    parts->attempts = attempts;
    /* A message id with no bytes is still an id: "" rather than none. */
    if (has_id && !parts->message_id) parts->message_id = "";
    if (has_type && !parts->content_type) parts->content_type = "";
    return 0;
}
