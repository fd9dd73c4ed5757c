/* id.c — the public face of id splitting (the splitter is id_parse.h), and the
 * names of results and causes. The producer is everything before the LAST ':',
 * so ActiveMQ ids ("ID:host-1234-1700000000000-1:1:1:1:42") keep their colons.
 */
#include "audit/audit_internal.h"
#include "audit/id_parse.h"

int acemq_audit_parse_id(const char *id, size_t id_len, acemq_audit_id *out)
{
    if (!out) return ACEMQ_EINVAL;
    return acemq__audit_split(id, id_len, out);
}

const char *acemq_audit_result_name(int result)
{
    switch (result) {
    case ACEMQ_AUDIT_NEW:
        return "NEW";
    case ACEMQ_AUDIT_DUPLICATE:
        return "DUPLICATE";
    case ACEMQ_AUDIT_UNKNOWN:
        return "UNKNOWN";
    default:
        return acemq_err_name(result);
    }
}

const char *acemq_audit_cause_name(int cause)
{
    switch (cause) {
    case ACEMQ_AUDIT_CAUSE_NONE:
        return "NONE";
    case ACEMQ_AUDIT_EVICTED:
        return "EVICTED";
    case ACEMQ_AUDIT_BEHIND_WINDOW:
        return "BEHIND_WINDOW";
    case ACEMQ_AUDIT_BEFORE_START:
        return "BEFORE_START";
    default:
        return "?";
    }
}
