/* logline.c — logfmt lines for routes (logline.h). */
#include "route/logline.h"

#include <string.h>

static int needs_quotes(const char *v, size_t n)
{
    if (n == 0) return 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) return 1;
    }
    return 0;
}

int acemq__logline_put(acemq__buf *line, const char *key, const char *value, size_t value_len)
{
    int rc = line->len ? acemq__buf_put(line, " ", 1) : 0;
    if (rc == 0) rc = acemq__buf_puts(line, key);
    if (rc == 0) rc = acemq__buf_put(line, "=", 1);
    if (rc != 0) return rc;
    if (!needs_quotes(value, value_len)) return acemq__buf_put(line, value, value_len);
    rc = acemq__buf_put(line, "\"", 1);
    for (size_t i = 0; rc == 0 && i < value_len; i++) {
        unsigned char c = (unsigned char)value[i];
        switch (c) {
        case '"':
            rc = acemq__buf_puts(line, "\\\"");
            break;
        case '\\':
            rc = acemq__buf_puts(line, "\\\\");
            break;
        case '\n':
            rc = acemq__buf_puts(line, "\\n");
            break;
        case '\r':
            rc = acemq__buf_puts(line, "\\r");
            break;
        case '\t':
            rc = acemq__buf_puts(line, "\\t");
            break;
        default:
            rc = c < ' ' || c == 0x7f ? acemq__buf_printf(line, "\\x%02x", c)
                                      : acemq__buf_put(line, &value[i], 1);
        }
    }
    return rc == 0 ? acemq__buf_put(line, "\"", 1) : rc;
}

int acemq__logline_puts(acemq__buf *line, const char *key, const char *value)
{
    return acemq__logline_put(line, key, value, strlen(value));
}

void acemq__logline_write(FILE *f, const acemq__buf *line)
{
    if (!f) return;
    flockfile(f);
    (void)fwrite(acemq__buf_str(line), 1, line->len, f);
    (void)fputc('\n', f);
    (void)fflush(f);
    funlockfile(f);
}
