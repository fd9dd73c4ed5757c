/* idem_admin.c — the operator's calls (`acemq idem`): counts by state, one
 * id's record, forgetting one id. They check their arguments as the rest of
 * the contract does and leave the work to the backend's optional methods. */
#include <string.h>

#include "idem/idem_backend.h"

static int64_t store_now(acemq_idem *h)
{
    return h->clock.now_ms(h->clock.ctx);
}

static int unsupported(acemq_idem *h, const char *what)
{
    return acemq__idem_fail(h, ACEMQ_ENOTSUP, "the %s store cannot %s", h->methods->name, what);
}

int acemq_idem_counts_get(acemq_idem *h, acemq_idem_counts *out)
{
    if (!h) return ACEMQ_EINVAL;
    if (!out) return acemq__idem_fail(h, ACEMQ_EINVAL, "out is NULL");
    memset(out, 0, sizeof *out);
    if (!h->methods->counts) return unsupported(h, "count its records");
    return h->methods->counts(h, store_now(h), out);
}

int acemq_idem_inspect(acemq_idem *h, const void *id, size_t id_len, acemq_idem_record *out)
{
    if (!h) return ACEMQ_EINVAL;
    if (!out) return acemq__idem_fail(h, ACEMQ_EINVAL, "out is NULL");
    memset(out, 0, sizeof *out);
    acemq__bytes key;
    int rc = acemq__idem_take_id(h, id, id_len, &key);
    if (rc != 0) return rc;
    if (!h->methods->inspect) return unsupported(h, "show a record");
    rc = h->methods->inspect(h, &key, store_now(h), out);
    if (rc == ACEMQ_ENOENT) acemq__idem_fail(h, rc, "the store holds no record of this id");
    return rc;
}

int acemq_idem_forget(acemq_idem *h, const void *id, size_t id_len)
{
    if (!h) return ACEMQ_EINVAL;
    acemq__bytes key;
    int rc = acemq__idem_take_id(h, id, id_len, &key);
    if (rc != 0) return rc;
    if (!h->methods->forget) return unsupported(h, "forget an id");
    return h->methods->forget(h, &key, store_now(h));
}

void acemq__idem_counts_add(acemq_idem_counts *out, int state, uint64_t n)
{
    switch (state) {
    case ACEMQ_IDEM_HELD:
        out->held += n;
        break;
    case ACEMQ_IDEM_CONFIRMED:
        out->confirmed += n;
        break;
    case ACEMQ_IDEM_EXPIRED:
        out->expired += n;
        break;
    default:
        out->abandoned += n;
        break;
    }
}

const char *acemq_idem_state_name(int state)
{
    switch (state) {
    case ACEMQ_IDEM_HELD:
        return "held";
    case ACEMQ_IDEM_ABANDONED:
        return "abandoned";
    case ACEMQ_IDEM_CONFIRMED:
        return "confirmed";
    case ACEMQ_IDEM_EXPIRED:
        return "expired";
    default:
        return "unknown";
    }
}
