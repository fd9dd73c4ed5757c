/* errors.c — acemq_strerror() and acemq_err_name(), both generated from
 * ACEMQ_ERRNO_MAP so a code can never lack its text. */
#include "acemq/common.h"

const char *acemq_strerror(int code)
{
    switch (code) {
    case ACEMQ_OK:
        return "success";
#define ACEMQ__ERRNO_MSG(name, value, msg)                                                         \
    case ACEMQ_##name:                                                                             \
        return msg;
        ACEMQ_ERRNO_MAP(ACEMQ__ERRNO_MSG)
#undef ACEMQ__ERRNO_MSG
    default:
        return "unknown error";
    }
}

const char *acemq_err_name(int code)
{
    switch (code) {
    case ACEMQ_OK:
        return "ACEMQ_OK";
#define ACEMQ__ERRNO_NAME(name, value, msg)                                                        \
    case ACEMQ_##name:                                                                             \
        return "ACEMQ_" #name;
        ACEMQ_ERRNO_MAP(ACEMQ__ERRNO_NAME)
#undef ACEMQ__ERRNO_NAME
    default:
        return "ACEMQ_UNKNOWN";
    }
}

const char *acemq_version(void)
{
    return ACEMQ_VERSION_STRING;
}
