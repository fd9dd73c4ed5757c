/* url.c — splits backend URLs; see url.h. */
#include "core/url.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "acemq/common.h"

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes %XX and '+' in place; ACEMQ_EURL on a broken escape or an escaped NUL. */
static int percent_decode(char *s)
{
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (*r == '%') {
            int hi = hex_value(r[1]), lo = hi < 0 ? -1 : hex_value(r[2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) return ACEMQ_EURL;
            *w++ = (char)(hi * 16 + lo);
            r += 2;
        } else if (*r == '+') {
            *w++ = ' ';
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
    return 0;
}

/* Where text's scheme ends (its first ':'), or NULL when it has no
 * well-formed scheme (RFC 3986: a letter, then letters, digits, '+-.'). */
static const char *scheme_end(const char *text)
{
    const char *colon = text ? strchr(text, ':') : NULL;
    if (!colon || colon == text) return NULL;
    for (const char *p = text; p < colon; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (p > text && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'));
        if (!ok) return NULL;
    }
    return colon;
}

int acemq__url_scheme(const char *text, char *buf, size_t cap)
{
    const char *colon = scheme_end(text);
    if (!colon || (size_t)(colon - text) >= cap) return ACEMQ_EURL;
    memcpy(buf, text, (size_t)(colon - text));
    buf[colon - text] = '\0';
    return 0;
}

int acemq__url_parse(acemq__url *u, const char *text)
{
    memset(u, 0, sizeof *u);
    const char *colon = scheme_end(text);
    if (!colon) return ACEMQ_EURL;
    u->buf = strdup(text);
    if (!u->buf) return ACEMQ_ENOMEM;
    u->scheme = u->buf;
    u->buf[colon - text] = '\0';
    u->rest = u->buf + (colon - text) + 1;
    char *query = strchr(u->rest, '?');
    if (!query) return 0;
    *query++ = '\0';
    char *save = NULL;
    for (char *pair = strtok_r(query, "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
        if (u->nparams == ACEMQ__URL_MAX_PARAMS) goto bad;
        char *eq = strchr(pair, '=');
        if (!eq || eq == pair) goto bad;
        *eq = '\0';
        if (percent_decode(pair) != 0 || percent_decode(eq + 1) != 0) goto bad;
        u->params[u->nparams].key = pair;
        u->params[u->nparams].value = eq + 1;
        u->nparams++;
    }
    return 0;
bad:
    acemq__url_free(u);
    return ACEMQ_EURL;
}

void acemq__url_free(acemq__url *u)
{
    if (!u) return;
    free(u->buf);
    memset(u, 0, sizeof *u);
}

const char *acemq__url_param(const acemq__url *u, const char *key)
{
    for (size_t i = 0; i < u->nparams; i++)
        if (strcmp(u->params[i].key, key) == 0) return u->params[i].value;
    return NULL;
}

int acemq__url_param_int(const acemq__url *u, const char *key, int64_t min, int64_t max,
                         int64_t *out)
{
    const char *v = acemq__url_param(u, key);
    if (!v) return 0;
    if (*v == '\0') return ACEMQ_EURL;
    char *end = NULL;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno != 0 || *end != '\0' || n < min || n > max) return ACEMQ_EURL;
    *out = n;
    return 0;
}

int acemq__url_check_params(const acemq__url *u, const char *const *known, const char **bad)
{
    for (size_t i = 0; i < u->nparams; i++) {
        int found = 0;
        for (const char *const *k = known; *k && !found; k++)
            found = strcmp(*k, u->params[i].key) == 0;
        if (!found) {
            if (bad) *bad = u->params[i].key;
            return ACEMQ_EURL;
        }
    }
    return 0;
}
