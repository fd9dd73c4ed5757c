/* memory_records.c — the memory store's records (see the header for why). */
#define _GNU_SOURCE /* MADV_HUGEPAGE, MAP_NORESERVE */
#include "store/memory_records.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "acemq/common.h"
#include "core/prefault.h"

#define HUGE_PAGE ((size_t)2 << 20)
#define FIRST_COMMIT ((size_t)256 << 10)
#define MAX_COMMIT_STEP ((size_t)64 << 20)

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) & ~(to - 1);
}

int acemq__records_init(acemq__records *r, size_t capacity)
{
    memset(r, 0, sizeof *r);
    if (capacity == 0 || capacity > ((size_t)1 << 32)) return ACEMQ_ENOMEM;
    size_t len = round_up(capacity * ACEMQ__RECORD_SIZE, HUGE_PAGE);
    /* One huge page more, so that base can start on a huge-page boundary. */
    size_t span = len + HUGE_PAGE;
    void *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return ACEMQ_ENOMEM;
    if (pthread_mutex_init(&r->lock, NULL) != 0) {
        (void)munmap(p, span);
        return ACEMQ_ENOMEM;
    }
    r->mapping = p;
    r->mapping_len = span;
    r->base = (unsigned char *)p + (round_up((uintptr_t)p, HUGE_PAGE) - (uintptr_t)p);
    r->reserved = len;
    r->capacity = capacity;
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
    if (upto < need) upto = round_up(need, HUGE_PAGE);
    if (upto > r->reserved) upto = r->reserved;
    unsigned char *from = r->base + r->committed;
    if (mprotect(from, upto - r->committed, PROT_READ | PROT_WRITE) != 0) return -1;
    /* Past the first huge page: a small store stays in small pages (a huge
     * page would be resident whole for a few records), a big one faults in
     * 2 MiB at a time and its records sit in few TLB entries. The advice is
     * only advice: without transparent huge pages nothing changes. */
    size_t huge_from = r->committed < HUGE_PAGE ? HUGE_PAGE : r->committed;
    if (upto > huge_from) (void)madvise(r->base + huge_from, upto - huge_from, MADV_HUGEPAGE);
    r->committed = upto;
    return 0;
}

void *acemq__records_take(acemq__records *r, size_t count)
{
    void *p = NULL;
    pthread_mutex_lock(&r->lock);
    if (count <= r->capacity - r->taken &&
        commit(r, (r->taken + count) * ACEMQ__RECORD_SIZE) == 0) {
        p = r->base + r->taken * ACEMQ__RECORD_SIZE;
        r->taken += count;
    }
    pthread_mutex_unlock(&r->lock);
    return p;
}

int acemq__records_prefault(acemq__records *r)
{
    pthread_mutex_lock(&r->lock);
    int rc = commit(r, r->capacity * ACEMQ__RECORD_SIZE);
    if (rc == 0) rc = acemq__prefault(r->base, r->committed);
    int saved = errno; /* for the caller, whatever the unlock does to it */
    pthread_mutex_unlock(&r->lock);
    errno = saved;
    return rc;
}

void acemq__records_destroy(acemq__records *r)
{
    if (!r->mapping) return;
    /* Unmapping a whole mapping of our own cannot fail. */
    (void)munmap(r->mapping, r->mapping_len);
    r->mapping = NULL;
    r->base = NULL;
    pthread_mutex_destroy(&r->lock);
}
