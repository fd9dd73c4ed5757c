/* buf.h — a growing byte buffer that keeps a NUL after its bytes, so text
 * built in it can be handed to C string functions while lengths stay exact
 * for bytes that hold NULs. */
#ifndef ACEMQ_CORE_BUF_H
#define ACEMQ_CORE_BUF_H

#include <stddef.h>

typedef struct acemq__buf {
    char *p; /* NULL until the first append; then p[len] == '\0' */
    size_t len;
    size_t cap;
} acemq__buf;

/* Appends n bytes: 0, or ACEMQ_ENOMEM with the buffer as it was. */
int acemq__buf_put(acemq__buf *b, const void *bytes, size_t n);
/* Appends a C string. */
int acemq__buf_puts(acemq__buf *b, const char *s);
/* Appends formatted text. */
int acemq__buf_printf(acemq__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Empties the buffer, keeping its memory. */
void acemq__buf_clear(acemq__buf *b);
/* The bytes as a C string: "" for a buffer never written to. */
const char *acemq__buf_str(const acemq__buf *b);
/* Frees the memory; the buffer is then empty and reusable. */
void acemq__buf_free(acemq__buf *b);

#endif
