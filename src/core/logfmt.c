/* logfmt.c — see logfmt.h. */
#include "core/logfmt.h"

#include <string.h>
#include <time.h>

static void log_value(FILE *f, const char *v)
{
    if (!v) v = "";
    if (!strpbrk(v, " \"=") && *v) {
        fputs(v, f);
        return;
    }
    fputc('"', f);
    for (; *v; v++) {
        if (*v == '"' || *v == '\\') fputc('\\', f);
        fputc(*v == '\n' ? ' ' : *v, f);
    }
    fputc('"', f);
}

void acemq__logfmt(FILE *f, const char *event, const char *k1, const char *v1, const char *k2,
                   const char *v2)
{
    if (!f) return;
    flockfile(f);
    time_t now = time(NULL);
    struct tm tm;
    char ts[32];
    if (gmtime_r(&now, &tm) && strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm))
        fprintf(f, "ts=%s ", ts);
    fprintf(f, "event=%s", event);
    if (k1) {
        fprintf(f, " %s=", k1);
        log_value(f, v1);
    }
    if (k2) {
        fprintf(f, " %s=", k2);
        log_value(f, v2);
    }
    fputc('\n', f);
    fflush(f);
    funlockfile(f);
}
