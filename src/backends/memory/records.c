/* records.c — the memory store's records (see the header for why). */
#define _GNU_SOURCE /* MADV_HUGEPAGE, MAP_NORESERVE */
#include "backends/memory/records.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "acemq/common.h"
#include "os/huge_map.h"
#include "os/prefault.h"

#define FIRST_COMMIT ((size_t)256 << 10)
#define MAX_COMMIT_STEP ((size_t)64 << 20)
/* How far past the records taken the populator keeps the region faulted
 * in: four huge pages, some 130,000 records, 25 ms of claims at 5 million a
 * second, against 1-8 ms to fault them in (backends/memory/records.h). */
#define AHEAD_BYTES ((size_t)8 << 20)

int acemq__records_init(acemq__records *r, size_t capacity, int ahead)
{
    memset(r, 0, sizeof *r);
    if (capacity == 0 || capacity > ((size_t)1 << 32)) return ACEMQ_ENOMEM;
    size_t len = acemq__round_up(capacity * ACEMQ__RECORD_SIZE, ACEMQ__HUGE_PAGE);
    unsigned char *p = acemq__map_huge_aligned(len, PROT_NONE, MAP_NORESERVE);
    if (!p) return ACEMQ_ENOMEM;
    if (pthread_mutex_init(&r->lock, NULL) != 0) {
        (void)munmap(p, len);
        return ACEMQ_ENOMEM;
    }
    r->base = p;
    r->reserved = len;
    r->capacity = capacity;
    r->ahead = ahead;
    acemq__populator_init(&r->populator, p);
    return 0;
}

/* Makes at least `need` bytes from base usable: 0, or -1 when mprotect
 * refused (out of memory under strict overcommit). Under r->lock. */
static int commit(acemq__records *r, size_t need)
{
    if (need <= r->committed) return 0;
    size_t step = r->committed < FIRST_COMMIT ? FIRST_COMMIT : r->committed;
    if (step > MAX_COMMIT_STEP) step = MAX_COMMIT_STEP;
    size_t upto = r->committed + step;
    if (upto < need) upto = acemq__round_up(need, ACEMQ__HUGE_PAGE);
    if (upto > r->reserved) upto = r->reserved;
    unsigned char *from = r->base + r->committed;
    if (mprotect(from, upto - r->committed, PROT_READ | PROT_WRITE) != 0) return -1;
    /* Past the first huge page: a small store stays in small pages (a huge
     * page would be resident whole for a few records), a big one faults in
     * 2 MiB at a time and its records sit in few TLB entries. The advice is
     * only advice: without transparent huge pages nothing changes. */
    size_t huge_from = r->committed < ACEMQ__HUGE_PAGE ? ACEMQ__HUGE_PAGE : r->committed;
    if (upto > huge_from) (void)madvise(r->base + huge_from, upto - huge_from, MADV_HUGEPAGE);
    r->committed = upto;
    return 0;
}

/* Past the first huge page (a small store starts no thread), keeps the
 * populator AHEAD_BYTES past the records taken, in steps of half that.
 * Under r->lock. A commit refused here is not the caller's failure: the
 * populator is asked for what is committed, and take() commits what it
 * needs as before. */
static void ask_ahead(acemq__records *r)
{
    size_t used = r->taken * ACEMQ__RECORD_SIZE;
    if (!r->ahead || used < ACEMQ__HUGE_PAGE || r->asked >= r->reserved ||
        r->asked >= used + AHEAD_BYTES / 2)
        return;
    size_t upto = used + AHEAD_BYTES < r->reserved ? used + AHEAD_BYTES : r->reserved;
    (void)commit(r, upto);
    if (upto > r->committed) upto = r->committed;
    if (upto <= r->asked) return;
    r->asked = upto;
    acemq__populator_ask(&r->populator, upto);
}

void *acemq__records_take(acemq__records *r, size_t count)
{
    void *p = NULL;
    pthread_mutex_lock(&r->lock);
    if (count <= r->capacity - r->taken &&
        commit(r, (r->taken + count) * ACEMQ__RECORD_SIZE) == 0) {
        p = r->base + r->taken * ACEMQ__RECORD_SIZE;
        r->taken += count;
        ask_ahead(r);
    }
    pthread_mutex_unlock(&r->lock);
    return p;
}

size_t acemq__records_wait_ahead(acemq__records *r)
{
    pthread_mutex_lock(&r->lock);
    size_t asked = r->asked;
    pthread_mutex_unlock(&r->lock);
    return acemq__populator_wait(&r->populator, asked);
}

void acemq__records_destroy(acemq__records *r)
{
    if (!r->base) return;
    acemq__populator_stop(&r->populator);
    /* Unmapping a whole mapping of our own cannot fail. */
    (void)munmap(r->base, r->reserved);
    r->base = NULL;
    pthread_mutex_destroy(&r->lock);
}
