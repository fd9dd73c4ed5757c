/* writer_queue.c — the in-process writer queue: one per database file,
 * found through a process-wide registry keyed by st_dev + st_ino, with fork
 * handlers. The SQLite store (backends/sqlite/idem.c) holds it around each write.
 *
 * SQLite has one write lock per file and no queue for it: a connection that
 * finds it taken sleeps in its busy handler and tries again, so after every
 * commit the lock sits idle until the next poller wakes. Between handles in
 * one process we can do better: a queue per file, whose holder is the one
 * thread of this process allowed to start a write transaction, and which on
 * release wakes the next waiter at once.
 *
 * Invariants a reader must keep:
 *
 *   A speed device, never a correctness one. Every write transaction the
 *   store starts on a file runs while its thread holds the file's queue, so
 *   handles in one process hand SQLite's write lock to each other through the
 *   queue instead of finding it taken and polling. Reads never enter it.
 *   SQLite's file locks still decide every race (other processes, the
 *   caller's own writes, a handle that gave up on the queue), so a write that
 *   goes ahead without the queue is slower, never wrong.
 *
 *   No deadlock. Three rules, which the user of the queue (backends/sqlite/idem.c's
 *   queue_enter and checkpoints) keeps:
 *     - lock order is the handle's own lock (s->lock), then the file's queue;
 *       a thread in the queue or holding it never waits for any handle's
 *       lock;
 *     - a connection waits for the queue only while it holds no SQLite
 *       transaction (sqlite3_txn_state is NONE), so no queue waiter holds a
 *       lock the queue holder may be waiting for; a caller's connection with
 *       its transaction open writes unqueued;
 *     - the queue is held only inside one of the store's calls, around
 *       statements that end their transaction before it is let go, and every
 *       wait for it is bounded by busy_timeout_ms (then the write goes ahead
 *       unqueued and SQLite's busy handling decides, with what is left of the
 *       budget).
 *
 *   One queue per file. The registry is keyed by st_dev + st_ino, not by
 *   path, so two spellings of one file share a queue; reg_lock guards it and
 *   is never taken while a queue is held.
 *
 * The queue is not strictly FIFO (Go's sync.Mutex is the model). In WAL mode a
 * connection that sees another's commit drops its whole page cache, so if two
 * threads took strict turns every write would start by re-reading the B-tree
 * and two threads would write slower than one. So a thread that releases and comes straight back,
 * or any thread that arrives while the queue is free, may take it before the woken waiter runs, and
 * writes go in bursts. A waiter that has waited QUEUE_STARVE_NS is not passed over again: the next
 * release hands the queue to it directly. No waiter waits much longer than that plus one write
 * transaction.
 *
 * A release wakes the first waiter at once. If that waiter then finds the
 * queue taken again, its holder is evidently running and coming straight
 * back, and waking the waiter on each of its releases would only cost both
 * threads a context switch per write. So until it gets the queue or starves, that waiter looks
 * again every QUEUE_POLL_NS instead and releases leave it be; a holder that does not come back
 * leaves the queue idle that long at most.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>

#include "backends/sqlite/writer_queue.h"

typedef struct qwaiter {
    pthread_cond_t cv;
    int granted;  /* the queue is this waiter's (handed over, or taken when free) */
    int starving; /* waited QUEUE_STARVE_NS: releases hand over to it */
    struct qwaiter *next;
} qwaiter;

struct acemq__writer_queue {
    dev_t dev;
    ino_t ino;
    int refs;                         /* joins not yet left; reg_lock guards it and next */
    struct acemq__writer_queue *next; /* in the registry */
    pthread_mutex_t m;                /* guards the fields below and every waiter's */
    int held;                         /* owned by a thread; stays 1 when handed over */
    int wake_pending; /* the first waiter is woken or polling: releases need not wake it */
    int waiting;
    qwaiter *head, *tail;
    int note; /* the users' per-file int; see acemq__writer_queue_note */
};

/* A waiter passed over for this long gets the queue handed to it (Go: 1 ms).
 * About twenty commits without fsync, two or three with. */
#define QUEUE_STARVE_NS 1000000L
/* How often a waiter that lost the race for a release looks again; see
 * acemq__writer_queue_acquire. About two commits without fsync. */
#define QUEUE_POLL_NS 100000L

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static acemq__writer_queue *reg_files;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static pthread_condattr_t mono_attr;
static int mono_attr_ok;

/* fork() copies the registry but not the threads: a queue held by a parent
 * thread would stay held in the child forever. The child starts an empty
 * registry; the copies of the parent's entries are left alone (never freed,
 * since inherited handles still point at them, and never used by new handles,
 * which must be opened in the child anyway). reg_lock is taken across fork so
 * the child never inherits it locked. */
static void reg_prefork(void)
{
    pthread_mutex_lock(&reg_lock);
}

static void reg_postfork_parent(void)
{
    pthread_mutex_unlock(&reg_lock);
}

static void reg_postfork_child(void)
{
    reg_files = NULL;
    pthread_mutex_unlock(&reg_lock);
}

static void reg_init(void)
{
    /* Queue waits are bounded in real time, which a clock step must not
     * stretch or cut: monotonic where the platform has it. */
    if (pthread_condattr_init(&mono_attr) == 0) {
        mono_attr_ok = 1;
        (void)pthread_condattr_setclock(&mono_attr, CLOCK_MONOTONIC);
    }
    (void)pthread_atfork(reg_prefork, reg_postfork_parent, reg_postfork_child);
}

static int monotonic_now(struct timespec *ts)
{
    return clock_gettime(CLOCK_MONOTONIC, ts);
}

static struct timespec ts_add_ns(struct timespec t, int64_t ns)
{
    t.tv_sec += (time_t)(ns / 1000000000);
    t.tv_nsec += (long)(ns % 1000000000);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static int ts_before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static void waiter_unlink(acemq__writer_queue *f, qwaiter *w)
{
    qwaiter **p = &f->head, *prev = NULL;
    while (*p != w) {
        prev = *p;
        p = &(*p)->next;
    }
    *p = w->next;
    if (f->tail == w) f->tail = prev;
}

int acemq__writer_queue_acquire(acemq__writer_queue *f, int timeout_ms, struct timespec *wait_start,
                                int *waited)
{
    pthread_mutex_lock(&f->m);
    /* Free means nobody is owed it: a release to a starving waiter keeps
     * held set. */
    if (!f->held) {
        f->held = 1;
        pthread_mutex_unlock(&f->m);
        return 1;
    }
    if (timeout_ms <= 0 || monotonic_now(wait_start) != 0) {
        pthread_mutex_unlock(&f->m);
        return 0;
    }
    *waited = 1;
    struct timespec deadline = ts_add_ns(*wait_start, (int64_t)timeout_ms * 1000000);
    struct timespec starve_at = ts_add_ns(*wait_start, QUEUE_STARVE_NS);
    qwaiter w = {.granted = 0, .starving = 0, .next = NULL};
    if (pthread_cond_init(&w.cv, mono_attr_ok ? &mono_attr : NULL) != 0) {
        pthread_mutex_unlock(&f->m);
        return 0;
    }
    /* w lives on this stack, and is in the line only until this call
     * returns: every way out of the loop below unlinks it (or a release did,
     * when it granted w the queue) under f->m. */
    if (f->tail) {
        f->tail->next = &w;
    } else {
        /* cppcheck-suppress autoVariables */
        f->head = &w;
    }
    /* cppcheck-suppress autoVariables */
    f->tail = &w;
    f->waiting++;
    int polling = 0;
    for (;;) {
        if (w.granted) break;
        if (!f->held && f->head == &w) { /* free, and first in line */
            f->held = 1;
            w.granted = 1;
            waiter_unlink(f, &w);
            break;
        }
        const struct timespec *until =
            w.starving || ts_before(&deadline, &starve_at) ? &deadline : &starve_at;
        struct timespec now, poll_at;
        if (polling && !w.starving && f->head == &w && monotonic_now(&now) == 0) {
            f->wake_pending = 1; /* releases leave a polling waiter be */
            poll_at = ts_add_ns(now, QUEUE_POLL_NS);
            if (ts_before(&poll_at, until)) until = &poll_at;
        }
        int rc = pthread_cond_timedwait(&w.cv, &f->m, until);
        int was_head = f->head == &w;
        if (was_head) f->wake_pending = 0;
        if (w.granted) break;
        if (rc == 0 || rc == EINTR) {
            polling = QUEUE_POLL_NS > 0 && was_head; /* if it is taken again, we lost */
            continue;
        }
        if (rc == ETIMEDOUT && monotonic_now(&now) == 0) {
            if (!ts_before(&now, &starve_at)) w.starving = 1; /* the next release hands over */
            if (ts_before(&now, &deadline)) continue;
        }
        if (!f->held && f->head == &w) continue; /* take it after all */
        /* Gave up (deadline, or the wait itself failed): leave the line. The
         * write goes ahead unqueued; SQLite's locks still decide. */
        waiter_unlink(f, &w);
        break;
    }
    f->waiting--;
    pthread_mutex_unlock(&f->m);
    /* Nobody signals w.cv any more: it left the queue under f->m. */
    (void)pthread_cond_destroy(&w.cv);
    return w.granted;
}

void acemq__writer_queue_release(acemq__writer_queue *f)
{
    pthread_mutex_lock(&f->m);
    qwaiter *w = f->head;
    if (w && w->starving) {
        waiter_unlink(f, w);
        w->granted = 1; /* held stays set: the queue is w's now */
        /* Under f->m: w lives on the waiter's stack, and the waiter cannot
         * return (and destroy w->cv) before it gets f->m back. */
        pthread_cond_signal(&w->cv);
    } else {
        f->held = 0;
        /* Wake the first waiter to compete for it, unless it is awake
         * already: one futex wake per write, not one per waiter. */
        if (w && !f->wake_pending) {
            f->wake_pending = 1;
            pthread_cond_signal(&w->cv);
        }
    }
    pthread_mutex_unlock(&f->m);
}

int acemq__writer_queue_note(acemq__writer_queue *f, int (*update)(int *note, int arg), int arg)
{
    pthread_mutex_lock(&f->m);
    int ret = update(&f->note, arg);
    pthread_mutex_unlock(&f->m);
    return ret;
}

acemq__writer_queue *acemq__writer_queue_join(dev_t dev, ino_t ino)
{
    (void)pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_lock);
    acemq__writer_queue *f = reg_files;
    while (f && !(f->dev == dev && f->ino == ino))
        f = f->next;
    if (!f) {
        f = calloc(1, sizeof *f);
        if (!f || pthread_mutex_init(&f->m, NULL) != 0) {
            pthread_mutex_unlock(&reg_lock);
            free(f);
            return NULL;
        }
        f->dev = dev;
        f->ino = ino;
        f->next = reg_files;
        reg_files = f;
    }
    f->refs++;
    pthread_mutex_unlock(&reg_lock);
    return f;
}

void acemq__writer_queue_leave(acemq__writer_queue *f)
{
    if (!f) return;
    pthread_mutex_lock(&reg_lock);
    if (--f->refs == 0) {
        acemq__writer_queue **p = &reg_files;
        while (*p && *p != f)
            p = &(*p)->next;
        /* Not in the registry: a parent's entry copied by fork(); see
         * reg_postfork_child. Left as it is. */
        if (*p) {
            *p = f->next;
            pthread_mutex_destroy(&f->m);
            free(f);
        }
    }
    pthread_mutex_unlock(&reg_lock);
}

size_t acemq__writer_queue_files(void)
{
    size_t n = 0;
    pthread_mutex_lock(&reg_lock);
    for (const acemq__writer_queue *f = reg_files; f; f = f->next)
        n++;
    pthread_mutex_unlock(&reg_lock);
    return n;
}

int acemq__writer_queue_waiters(acemq__writer_queue *f)
{
    pthread_mutex_lock(&f->m);
    int n = f->waiting;
    pthread_mutex_unlock(&f->m);
    return n;
}
