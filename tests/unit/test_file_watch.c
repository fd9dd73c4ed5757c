/* test_file_watch.c — the wake-up SQLite's outbox waits on (file_watch.h):
 * a write to the database file, its -wal or its -journal is seen, a write
 * to any other file of the directory is not, and a directory that goes away
 * ends the watch. inotify queues an event when the write returns, so every
 * answer here follows from what was written before the look, not from how
 * fast anything runs. Linux only, as the watch is; elsewhere the test checks
 * that opening a watch says it is unavailable. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "os/file_watch.h"
#include "unit/scratch_db.h"

typedef scratch_db fixture;

static int setup(void **state)
{
    return scratch_db_setup(state, "watch");
}

static int teardown(void **state)
{
    return scratch_db_teardown(state);
}

static const char *const names[] = {"app.db",     "app.db-wal", "app.db-journal",
                                    "app.db-shm", "app.db2",    "other"};

/* Appends a few bytes to dir/name, creating it. */
static void write_to(const fixture *f, const char *name)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", f->dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "page", 4), 4);
    assert_int_equal(close(fd), 0);
}

#ifdef __linux__

static void writes_to_the_file_and_its_companions_wake(void **state)
{
    fixture *f = *state;
    acemq__file_watch w;
    assert_int_equal(acemq__file_watch_open(&w, f->path), 0);
    assert_int_equal(acemq__file_watch_wait(&w, 0), 0);
    for (int i = 0; i < 3; i++) {
        write_to(f, names[i]);
        /* A long timeout that is never waited out: the event is queued. */
        assert_int_equal(acemq__file_watch_wait(&w, 10000), 1);
        /* Every event of that write was taken. */
        assert_int_equal(acemq__file_watch_wait(&w, 0), 0);
    }
    /* Several writes before one look: one answer, and nothing left. */
    write_to(f, "app.db-wal");
    write_to(f, "app.db");
    assert_int_equal(acemq__file_watch_wait(&w, 0), 1);
    assert_int_equal(acemq__file_watch_wait(&w, 0), 0);
    acemq__file_watch_close(&w);
    acemq__file_watch_close(&w); /* twice is fine */
}

static void other_files_do_not_wake(void **state)
{
    fixture *f = *state;
    acemq__file_watch w;
    assert_int_equal(acemq__file_watch_open(&w, f->path), 0);
    /* -shm is written through a memory map, which inotify does not see, so
     * its write() here must not count either; a name that only begins
     * like the file's is another file. */
    for (int i = 3; i < 6; i++) {
        write_to(f, names[i]);
        assert_int_equal(acemq__file_watch_wait(&w, 0), 0);
    }
    /* Taken among others, the file's own write still counts. */
    write_to(f, "other");
    write_to(f, "app.db");
    write_to(f, "app.db2");
    assert_int_equal(acemq__file_watch_wait(&w, 0), 1);
    acemq__file_watch_close(&w);
}

static void a_directory_that_goes_ends_the_watch(void **state)
{
    fixture *f = *state;
    acemq__file_watch w;
    assert_int_equal(acemq__file_watch_open(&w, f->path), 0);
    assert_int_equal(rmdir(f->dir), 0);
    errno = 0;
    assert_int_equal(acemq__file_watch_wait(&w, 10000), -1);
    assert_int_equal(errno, ENOENT);
    acemq__file_watch_close(&w);
    /* teardown's rmdir finds nothing to remove, which it ignores. */
}

static void unwatchable_paths_are_refused(void **state)
{
    fixture *f = *state;
    acemq__file_watch w;
    char p[128];
    snprintf(p, sizeof p, "%s/", f->dir); /* no file name */
    errno = 0;
    assert_int_equal(acemq__file_watch_open(&w, p), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(w.fd, -1);
    snprintf(p, sizeof p, "%s/missing/app.db", f->dir);
    errno = 0;
    assert_int_equal(acemq__file_watch_open(&w, p), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(w.fd, -1);
    errno = 0;
    assert_int_equal(acemq__file_watch_wait(&w, 0), -1);
    assert_int_equal(errno, EBADF);
    acemq__file_watch_close(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(writes_to_the_file_and_its_companions_wake, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(other_files_do_not_wake, setup, teardown),
        cmocka_unit_test_setup_teardown(a_directory_that_goes_ends_the_watch, setup, teardown),
        cmocka_unit_test_setup_teardown(unwatchable_paths_are_refused, setup, teardown),
    };
    return cmocka_run_group_tests_name("file watch", tests, NULL, NULL);
}

#else

static void no_watch_without_inotify(void **state)
{
    fixture *f = *state;
    acemq__file_watch w;
    write_to(f, "app.db");
    errno = 0;
    assert_int_equal(acemq__file_watch_open(&w, f->path), -1);
    assert_int_equal(errno, ENOSYS);
    acemq__file_watch_close(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(no_watch_without_inotify, setup, teardown),
    };
    return cmocka_run_group_tests_name("file watch", tests, NULL, NULL);
}

#endif
