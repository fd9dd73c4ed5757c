/* log.h — the library's warnings, to the application's function
 * (acemq_log_set, include/acemq/log.h) or to stderr. */
#ifndef ACEMQ_CORE_LOG_H
#define ACEMQ_CORE_LOG_H

/* Formats one warning and hands it on. */
void acemq__log_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
