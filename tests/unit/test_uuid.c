/* test_uuid.c — acemq_uuid7 (src/core/uuid.c): the UUIDv7 layout, ids that
 * stay distinct across many pools of random bytes and many threads, and a
 * forked child that never repeats its parent's random bits. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/uuid.h"

/* The last 16 characters: 60 of rand_b's 62 random bits, and the '-'
 * among them. */
#define RANDOM_TAIL_AT 20

static int compare_ids(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* No two of the n rows hold the same string (sorts them). */
static void assert_all_distinct(char (*rows)[ACEMQ__UUID_LEN + 1], size_t n)
{
    qsort(rows, n, sizeof *rows, compare_ids);
    for (size_t i = 1; i < n; i++)
        assert_string_not_equal(rows[i - 1], rows[i]);
}

static void ids_have_the_version_7_layout(void **state)
{
    (void)state;
    char id[ACEMQ__UUID_LEN + 1];
    assert_int_equal(acemq_uuid7(id), 0);
    assert_int_equal(strlen(id), ACEMQ__UUID_LEN);
    for (int i = 0; i < ACEMQ__UUID_LEN; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23)
            assert_int_equal(id[i], '-');
        else
            assert_non_null(strchr("0123456789abcdef", id[i]));
    }
    assert_int_equal(id[14], '7');
    assert_non_null(strchr("89ab", id[19]));
    assert_int_equal(acemq_uuid7(NULL), ACEMQ_EINVAL);
}

/* Many times the pool's size: every id, and every id's random part,
 * distinct, and the ids in the order they were made. */
static void ids_across_many_pools_are_distinct_and_ordered(void **state)
{
    (void)state;
    enum { N = 20000 };
    char prev[ACEMQ__UUID_LEN + 1] = "";
    char(*tails)[ACEMQ__UUID_LEN + 1] = calloc(N, sizeof *tails);
    assert_non_null(tails);
    for (int i = 0; i < N; i++) {
        char id[ACEMQ__UUID_LEN + 1];
        assert_int_equal(acemq_uuid7(id), 0);
        assert_true(strcmp(prev, id) < 0);
        memcpy(prev, id, sizeof id);
        memcpy(tails[i], id + RANDOM_TAIL_AT, ACEMQ__UUID_LEN + 1 - RANDOM_TAIL_AT);
    }
    assert_all_distinct(tails, N);
    free(tails);
}

#define THREADS 4
#define PER_THREAD ((size_t)5000)

static void *make_ids(void *arg)
{
    char(*ids)[ACEMQ__UUID_LEN + 1] = arg;
    for (size_t i = 0; i < PER_THREAD; i++)
        if (acemq_uuid7(ids[i]) != 0) return arg;
    return NULL;
}

static void threads_drawing_at_once_get_distinct_ids(void **state)
{
    (void)state;
    char(*ids)[ACEMQ__UUID_LEN + 1] = calloc(THREADS * PER_THREAD, sizeof *ids);
    assert_non_null(ids);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, make_ids, ids + i * PER_THREAD), 0);
    for (int i = 0; i < THREADS; i++) {
        void *failed = ids;
        assert_int_equal(pthread_join(t[i], &failed), 0);
        assert_null(failed);
    }
    assert_all_distinct(ids, THREADS * PER_THREAD);
    free(ids);
}

/* The parent has random bytes left in its pool when it forks; the child's
 * first id and the parent's next one must not share them. */
static void a_forked_child_does_not_repeat_its_parents_random_bits(void **state)
{
    (void)state;
    char before[ACEMQ__UUID_LEN + 1], parent[ACEMQ__UUID_LEN + 1];
    char child[ACEMQ__UUID_LEN + 1] = "";
    assert_int_equal(acemq_uuid7(before), 0);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char id[ACEMQ__UUID_LEN + 1];
        int ok = acemq_uuid7(id) == 0 && write(fds[1], id, sizeof id) == (ssize_t)sizeof id;
        _exit(ok ? 0 : 1);
    }
    assert_int_equal(close(fds[1]), 0);
    assert_int_equal(acemq_uuid7(parent), 0);
    assert_int_equal(read(fds[0], child, sizeof child), (ssize_t)sizeof child);
    assert_int_equal(close(fds[0]), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(strlen(child), ACEMQ__UUID_LEN);
    assert_string_not_equal(child + RANDOM_TAIL_AT, parent + RANDOM_TAIL_AT);
    assert_string_not_equal(child + RANDOM_TAIL_AT, before + RANDOM_TAIL_AT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ids_have_the_version_7_layout),
        cmocka_unit_test(ids_across_many_pools_are_distinct_and_ordered),
        cmocka_unit_test(threads_drawing_at_once_get_distinct_ids),
        cmocka_unit_test(a_forked_child_does_not_repeat_its_parents_random_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
