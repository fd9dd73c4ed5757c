/* acemq/common.h — export macro, the error map and the clock.
 *
 * Every public function returns int: 0 (or a non-negative result) on success,
 * a negative ACEMQ_E* code on failure. One X-macro list below generates the
 * enum, acemq_strerror() and acemq_err_name(), so codes and texts cannot drift.
 */
#ifndef ACEMQ_COMMON_H
#define ACEMQ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(ACEMQ_BUILDING) && defined(__GNUC__)
#define ACEMQ_EXTERN __attribute__((visibility("default")))
#else
#define ACEMQ_EXTERN
#endif

/* X(NAME, value, message). Values are only ever appended; never renumbered. */
#define ACEMQ_ERRNO_MAP(X)                                                                         \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(ESTALE, -3, "stale fencing token: the claim was taken over, released or forgotten")          \
    X(ENOENT, -4, "no such entry")                                                                 \
    X(EMISMATCH, -5, "id already seen with a different payload fingerprint")                       \
    X(ENOTX, -6, "no transaction is open on the caller's connection")                              \
    X(EFULL, -7, "store is full and holds only live claims")                                       \
    X(EBUSY, -8, "database stayed locked past the busy timeout")                                   \
    X(EIO, -9, "I/O error")                                                                        \
    X(EBACKEND, -10, "the backend reported an error")                                              \
    X(ENOTSUP, -11, "operation not supported by this backend")                                     \
    X(EURL, -12, "unrecognised or malformed URL")                                                  \
    X(ESCHEMA, -13, "database schema is newer than this library understands")                      \
    X(ERANGE, -14, "value out of range")                                                           \
    X(EEXIST, -15, "an entry with this id already exists")                                         \
    X(EAUTH, -16, "the server refused the credentials or the virtual host")

typedef enum acemq_errno {
    ACEMQ_OK = 0,
#define ACEMQ__ERRNO_ENUM(name, value, msg) ACEMQ_##name = (value),
    ACEMQ_ERRNO_MAP(ACEMQ__ERRNO_ENUM)
#undef ACEMQ__ERRNO_ENUM
} acemq_errno;

/* "invalid argument"; "unknown error" for a code not in the map. Never NULL. */
ACEMQ_EXTERN const char *acemq_strerror(int code);
/* "ACEMQ_EINVAL"; "ACEMQ_OK" for 0; "ACEMQ_UNKNOWN" otherwise. Never NULL. */
ACEMQ_EXTERN const char *acemq_err_name(int code);

/* The library's version, "MAJOR.MINOR.PATCH". */
ACEMQ_EXTERN const char *acemq_version(void);

/* SQLite's PRAGMA synchronous, for the stores on SQLite. */
typedef enum acemq_sync_mode {
    ACEMQ_SYNC_OFF = 0,
    ACEMQ_SYNC_NORMAL = 1,
    ACEMQ_SYNC_FULL = 2
} acemq_sync_mode;

/* A clock in milliseconds. Leases and retention read time only through this,
 * so tests move time instead of sleeping. now_ms must be safe to call from
 * several threads at once. */
typedef struct acemq_clock {
    int64_t (*now_ms)(void *ctx);
    void *ctx;
} acemq_clock;

/* The default: wall-clock milliseconds since the Unix epoch, read from the
 * kernel's coarse clock where there is one (resolution one tick, 1-4 ms): for
 * leases and retention, not for measuring latency. */
ACEMQ_EXTERN const acemq_clock *acemq_clock_system(void);

/* A clock that moves only when told to: for tests, and for callers that
 * simulate time. Thread-safe. */
typedef struct acemq_manual_clock acemq_manual_clock;
ACEMQ_EXTERN int acemq_manual_clock_new(acemq_manual_clock **out, int64_t start_ms);
ACEMQ_EXTERN void acemq_manual_clock_free(acemq_manual_clock *c);
ACEMQ_EXTERN const acemq_clock *acemq_manual_clock_get(acemq_manual_clock *c);
ACEMQ_EXTERN void acemq_manual_clock_set(acemq_manual_clock *c, int64_t now_ms);
ACEMQ_EXTERN void acemq_manual_clock_advance(acemq_manual_clock *c, int64_t delta_ms);

#ifdef __cplusplus
}
#endif
#endif
