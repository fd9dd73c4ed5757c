/* test_memory_room.c — the room a process has, read from /proc and cgroup
 * files laid out in a scratch directory: the machine's available memory,
 * cgroup v1 and v2 limits on the process's own cgroup and its ancestors,
 * page cache counted as room, and files that are missing or malformed. */
#define _GNU_SOURCE /* nftw's FTW_DEPTH, mkdtemp */
#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "os/memory_room.h"

#define MIB ((size_t)1 << 20)
#define V1_UNLIMITED "9223372036854771712\n"

typedef struct tree {
    char root[256];
    char meminfo[300], proc_cgroup[300], cgroups[300];
} tree;

/* mkdir -p of the directory part of root/rel, then rel's contents. */
static void put(const tree *t, const char *rel, const char *contents)
{
    char path[512];
    assert_true(snprintf(path, sizeof path, "%s/%s", t->root, rel) < (int)sizeof path);
    for (char *p = path + strlen(t->root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(contents, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
    tree *t = calloc(1, sizeof *t);
    assert_non_null(t);
    const char *tmp = getenv("TMPDIR");
    snprintf(t->root, sizeof t->root, "%s/acemq-room-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(t->root));
    snprintf(t->meminfo, sizeof t->meminfo, "%s/proc/meminfo", t->root);
    snprintf(t->proc_cgroup, sizeof t->proc_cgroup, "%s/proc/self/cgroup", t->root);
    snprintf(t->cgroups, sizeof t->cgroups, "%s/sys/fs/cgroup", t->root);
    put(t, "proc/meminfo",
        "MemTotal:       24684000 kB\nMemFree:        20000000 kB\n"
        "MemAvailable:    8388608 kB\nBuffers:           10000 kB\n");
    *state = t;
    return 0;
}

static int remove_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    return remove(path);
}

static int teardown(void **state)
{
    tree *t = *state;
    assert_int_equal(nftw(t->root, remove_one, 16, FTW_DEPTH | FTW_PHYS), 0);
    free(t);
    return 0;
}

static acemq__memory_room room_of(const tree *t)
{
    acemq__memory_room r;
    acemq__memory_room_at(t->meminfo, t->proc_cgroup, t->cgroups, &r);
    return r;
}

/* No cgroup limits anywhere (the roots say none, v1 with its huge number,
 * v2 with "max"): the machine's MemAvailable is the room. */
static void without_limits_the_machine_bounds(void **state)
{
    tree *t = *state;
    put(t, "proc/self/cgroup", "4:memory:/a\n0::/b\n");
    put(t, "sys/fs/cgroup/memory/memory.limit_in_bytes", V1_UNLIMITED);
    put(t, "sys/fs/cgroup/memory/a/memory.limit_in_bytes", V1_UNLIMITED);
    put(t, "sys/fs/cgroup/unified/b/memory.max", "max\n");
    acemq__memory_room r = room_of(t);
    assert_int_equal(r.bytes, 8192 * MIB);
    assert_string_equal(r.bound, "available on this machine");
}

/* cgroup v1: the limit on an ancestor binds its child, and the room is the
 * limit less what the cgroup holds that is not page cache. */
static void a_v1_ancestor_limit_bounds(void **state)
{
    tree *t = *state;
    put(t, "proc/self/cgroup", "5:devices:/a/b\n4:cpuacct,memory:/a/b\n0::/\n");
    put(t, "sys/fs/cgroup/memory/memory.limit_in_bytes", V1_UNLIMITED);
    put(t, "sys/fs/cgroup/memory/a/memory.limit_in_bytes", "536870912\n");
    put(t, "sys/fs/cgroup/memory/a/memory.usage_in_bytes", "314572800\n");
    put(t, "sys/fs/cgroup/memory/a/memory.stat",
        "cache 1\nrss 2\nactive_file 3\ntotal_cache 104857600\n"
        "total_active_file 62914560\ntotal_inactive_file 41943040\n");
    put(t, "sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", V1_UNLIMITED);
    acemq__memory_room r = room_of(t);
    /* 512 MiB less (300 MiB in use - 100 MiB of page cache) */
    assert_int_equal(r.bytes, 312 * MIB);
    assert_string_equal(r.bound, "left under the memory cgroup /a's limit of 512 MiB (200 MiB "
                                 "of it in use)");
}

/* cgroup v2, mounted at the root (a pure v2 system): the tighter of the
 * process's own limit and its parent's. */
static void the_tighter_v2_limit_bounds(void **state)
{
    tree *t = *state;
    put(t, "proc/self/cgroup", "0::/x/y\n");
    put(t, "sys/fs/cgroup/x/memory.max", "1073741824\n");
    put(t, "sys/fs/cgroup/x/memory.current", "104857600\n");
    put(t, "sys/fs/cgroup/x/y/memory.max", "268435456\n");
    put(t, "sys/fs/cgroup/x/y/memory.current", "62914560\n");
    put(t, "sys/fs/cgroup/x/y/memory.stat", "anon 52428800\nfile 10485760\nkernel 0\n");
    acemq__memory_room r = room_of(t);
    /* 256 MiB less (60 MiB - 10 MiB of file pages), under the parent's 924 */
    assert_int_equal(r.bytes, 206 * MIB);
    assert_non_null(strstr(r.bound, "/x/y's limit of 256 MiB"));
}

/* A hybrid system (v1 memory controller, v2 at cgroup/unified): both are
 * read, and the smaller room wins; a cgroup over its limit has none. */
static void the_smallest_room_of_all_bounds(void **state)
{
    tree *t = *state;
    put(t, "proc/self/cgroup", "4:memory:/m\n0::/u\n");
    put(t, "sys/fs/cgroup/memory/m/memory.limit_in_bytes", "2147483648\n");
    put(t, "sys/fs/cgroup/unified/u/memory.max", "134217728\n");
    put(t, "sys/fs/cgroup/unified/u/memory.current", "201326592\n");
    acemq__memory_room r = room_of(t);
    assert_int_equal(r.bytes, 0);
    assert_non_null(strstr(r.bound, "/u's limit of 128 MiB (192 MiB of it in use)"));
}

/* Files that are missing, empty or not numbers bound nothing; a path that is
 * not under the mount (a container's view from the host) is passed over up
 * to the root, whose limit still counts. */
static void what_does_not_parse_bounds_nothing(void **state)
{
    tree *t = *state;
    put(t, "proc/self/cgroup", "garbage\n4:memory\n4:memory:/gone/deeper\n0::/v\n\n");
    put(t, "sys/fs/cgroup/memory/memory.limit_in_bytes", "4294967296\n");
    put(t, "sys/fs/cgroup/memory/memory.usage_in_bytes", "not a number\n");
    put(t, "sys/fs/cgroup/v/memory.max", "12abc\n");
    put(t, "sys/fs/cgroup/unified/v/memory.max", "\n");
    acemq__memory_room r = room_of(t);
    assert_int_equal(r.bytes, 4096 * MIB);
    assert_string_equal(r.bound, "left under the memory cgroup /'s limit of 4096 MiB (0 MiB of it "
                                 "in use)");
}

/* Without MemAvailable the machine's physical memory bounds; without any
 * file at all, nothing does. */
static void without_meminfo_physical_memory_bounds(void **state)
{
    tree *t = *state;
    put(t, "proc/meminfo", "MemTotal:       24684000 kB\n");
    acemq__memory_room r = room_of(t);
    size_t physical = acemq__physical_memory();
    if (physical == 0) skip();
    assert_int_equal(r.bytes, physical);
    assert_string_equal(r.bound, "of memory on this machine");
    acemq__memory_room none;
    acemq__memory_room_at("/nonexistent/meminfo", "/nonexistent/cgroup", "/nonexistent", &none);
    assert_int_equal(none.bytes, physical);
}

/* sysconf's figure: some memory, in whole pages. */
static void physical_memory_is_known(void **state)
{
    (void)state;
    size_t have = acemq__physical_memory();
    assert_true(have >= ((size_t)64 << 20));
    assert_int_equal(have % (size_t)sysconf(_SC_PAGESIZE), 0);
}

/* The real files: whatever bounds this process, it is some memory, and
 * says what it is. */
static void this_process_has_room(void **state)
{
    (void)state;
    acemq__memory_room r;
    acemq__memory_room_get(&r);
    assert_true(r.bytes > 0);
    assert_true(r.bytes < SIZE_MAX);
    assert_true(r.bound[0] != '\0');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(without_limits_the_machine_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(a_v1_ancestor_limit_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(the_tighter_v2_limit_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(the_smallest_room_of_all_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(what_does_not_parse_bounds_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(without_meminfo_physical_memory_bounds, setup, teardown),
        cmocka_unit_test(physical_memory_is_known),
        cmocka_unit_test(this_process_has_room),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
