/* memory_room.c — see memory_room.h. */
#include "os/memory_room.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB ((unsigned long long)1 << 20)
/* cgroup v1 says "no limit" with the largest page-aligned signed 64-bit
 * value, 9223372036854771712; no machine has anywhere near 2^60 bytes. */
#define NO_LIMIT ((unsigned long long)1 << 60)
#define FILE_BYTES 8192 /* memory.stat and /proc/meminfo are about 2 KiB */
#define PATH_BYTES 4096

/* A file's first FILE_BYTES - 1 bytes, NUL-terminated in buf; 0, or -1
 * when it cannot be read. */
static int read_text(const char *path, char *buf)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, FILE_BYTES - 1, f);
    int failed = ferror(f);
    if (fclose(f) != 0) failed = 1;
    if (failed) return -1;
    buf[n] = '\0';
    return 0;
}

/* A decimal number that s starts with (after blanks) and that ends at a
 * blank or the end: 0, or -1. */
static int parse_number(const char *s, unsigned long long *out)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s < '0' || *s > '9') return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || (*end != '\0' && *end != '\n' && *end != ' ')) return -1;
    *out = v;
    return 0;
}

/* The number after `key` at the start of a line of text ("key value"). */
static int find_field(const char *text, const char *key, unsigned long long *out)
{
    size_t len = strlen(key);
    for (const char *line = text; *line; line++) {
        if (strncmp(line, key, len) == 0 && (line[len] == ' ' || line[len] == '\t'))
            return parse_number(line + len, out);
        line = strchr(line, '\n');
        if (!line) break;
    }
    return -1;
}

/* read_text of dir/name. */
static int read_in(const char *dir, const char *name, char *buf)
{
    char path[PATH_BYTES];
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= sizeof path ? -1 : read_text(path, buf);
}

/* The number in dir/name, or -1 when there is none. */
static int read_number(const char *dir, const char *name, unsigned long long *out)
{
    char buf[FILE_BYTES];
    return read_in(dir, name, buf) != 0 ? -1 : parse_number(buf, out);
}

/* The sum of the named fields of dir/memory.stat; 0 when it has none. */
static unsigned long long stat_sum(const char *dir, const char *a, const char *b)
{
    char buf[FILE_BYTES];
    if (read_in(dir, "memory.stat", buf) != 0) return 0;
    unsigned long long x = 0, y = 0, sum = 0;
    if (find_field(buf, a, &x) == 0) sum += x;
    if (b && find_field(buf, b, &y) == 0) sum += y;
    return sum;
}

static void offer(acemq__memory_room *out, unsigned long long bytes, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Takes bytes as the room when it is less than what was found so far. */
static void offer(acemq__memory_room *out, unsigned long long bytes, const char *fmt, ...)
{
    if (bytes >= out->bytes) return;
    out->bytes = bytes > SIZE_MAX ? SIZE_MAX : (size_t)bytes;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out->bound, sizeof out->bound, fmt, ap);
    va_end(ap);
    if (n < 0) out->bound[0] = '\0';
}

/* One cgroup's room: its limit less what it holds that it cannot give
 * back (its usage less its page cache). */
static void offer_cgroup(acemq__memory_room *out, const char *name, unsigned long long limit,
                         unsigned long long usage, unsigned long long file)
{
    unsigned long long held = usage > file ? usage - file : 0;
    unsigned long long room = limit > held ? limit - held : 0;
    offer(out, room, "left under the memory cgroup %s's limit of %llu MiB (%llu MiB of it in use)",
          name[0] ? name : "/", limit / MIB, held / MIB);
}

static void cgroup_v1(acemq__memory_room *out, const char *dir, const char *name)
{
    unsigned long long limit = 0, usage = 0;
    if (read_number(dir, "memory.limit_in_bytes", &limit) != 0 || limit >= NO_LIMIT) return;
    if (read_number(dir, "memory.usage_in_bytes", &usage) != 0) usage = 0;
    /* total_*: the cgroup and its children, as its usage counts them. */
    offer_cgroup(out, name, limit, usage,
                 stat_sum(dir, "total_active_file", "total_inactive_file"));
}

static void cgroup_v2(acemq__memory_room *out, const char *dir, const char *name)
{
    unsigned long long limit = 0, usage = 0;
    /* "max" does not parse: no limit. */
    if (read_number(dir, "memory.max", &limit) != 0 || limit >= NO_LIMIT) return;
    if (read_number(dir, "memory.current", &usage) != 0) usage = 0;
    offer_cgroup(out, name, limit, usage, stat_sum(dir, "file", NULL));
}

/* Every cgroup from the process's own (path, under the hierarchy mounted
 * at base) up to the hierarchy's root: a parent's limit binds its children.
 * Levels that are not there (a path seen from outside a container's
 * mount) are passed over. */
static void walk_up(acemq__memory_room *out, const char *base, const char *path,
                    void (*level)(acemq__memory_room *, const char *, const char *))
{
    char name[PATH_BYTES], dir[PATH_BYTES];
    int n = snprintf(name, sizeof name, "%s", path);
    if (n < 0 || (size_t)n >= sizeof name) return;
    for (;;) {
        size_t len = strlen(name);
        while (len > 0 && name[len - 1] == '/')
            name[--len] = '\0';
        n = snprintf(dir, sizeof dir, "%s%s", base, name);
        if (n >= 0 && (size_t)n < sizeof dir) level(out, dir, name);
        char *slash = strrchr(name, '/');
        if (len == 0 || !slash) return;
        *slash = '\0';
    }
}

/* Whether the comma-separated list names the memory controller. */
static int names_memory(const char *list, size_t len)
{
    for (const char *p = list; p < list + len;) {
        const char *comma = memchr(p, ',', (size_t)(list + len - p));
        size_t n = comma ? (size_t)(comma - p) : (size_t)(list + len - p);
        if (n == 6 && memcmp(p, "memory", 6) == 0) return 1;
        p += n + 1;
    }
    return 0;
}

/* Each line of /proc/self/cgroup is "id:controllers:path": v1's memory
 * hierarchy names "memory" among its controllers, v2's is id 0 with none. */
static void cgroups(acemq__memory_room *out, const char *proc_cgroup, const char *root)
{
    char buf[FILE_BYTES], base[PATH_BYTES];
    if (read_text(proc_cgroup, buf) != 0) return;
    for (char *line = buf, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        const char *path = c2 + 1;
        if (names_memory(c1 + 1, (size_t)(c2 - c1 - 1))) {
            int n = snprintf(base, sizeof base, "%s/memory", root);
            if (n >= 0 && (size_t)n < sizeof base) walk_up(out, base, path, cgroup_v1);
        } else if (c1 - line == 1 && line[0] == '0' && c2 == c1 + 1) {
            walk_up(out, root, path, cgroup_v2);
            int n = snprintf(base, sizeof base, "%s/unified", root);
            if (n >= 0 && (size_t)n < sizeof base) walk_up(out, base, path, cgroup_v2);
        }
    }
}

size_t acemq__physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return 0;
    return (size_t)pages > SIZE_MAX / (size_t)page ? SIZE_MAX : (size_t)pages * (size_t)page;
}

static void machine(acemq__memory_room *out, const char *meminfo)
{
    char buf[FILE_BYTES];
    unsigned long long kib = 0;
    if (read_text(meminfo, buf) == 0 && find_field(buf, "MemAvailable:", &kib) == 0 &&
        kib < NO_LIMIT / 1024) {
        offer(out, kib * 1024, "available on this machine");
        return;
    }
    size_t physical = acemq__physical_memory();
    if (physical > 0) offer(out, physical, "of memory on this machine");
}

void acemq__memory_room_at(const char *meminfo, const char *proc_cgroup, const char *cgroup_root,
                           acemq__memory_room *out)
{
    out->bytes = SIZE_MAX;
    out->bound[0] = '\0';
    machine(out, meminfo);
    cgroups(out, proc_cgroup, cgroup_root);
}

void acemq__memory_room_get(acemq__memory_room *out)
{
    acemq__memory_room_at("/proc/meminfo", "/proc/self/cgroup", "/sys/fs/cgroup", out);
}
