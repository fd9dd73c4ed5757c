/* claim_sync.c — the synchronous level a claim commits at (see the header). */
#include "backends/sqlite/claim_sync.h"

#include "acemq/common.h"

void acemq__claim_sync_init(acemq__claim_sync *cs, int synchronous)
{
    cs->enabled = synchronous == ACEMQ_SYNC_FULL;
    cs->relaxed = 0;
}

int acemq__claim_sync_set(acemq__claim_sync *cs, sqlite3 *db, int relaxed)
{
    if (!cs->enabled || cs->relaxed == relaxed) return SQLITE_OK;
    int rc = sqlite3_exec(db, relaxed ? "PRAGMA synchronous=NORMAL" : "PRAGMA synchronous=FULL",
                          NULL, NULL, NULL);
    if (rc == SQLITE_OK) cs->relaxed = relaxed;
    return rc;
}
