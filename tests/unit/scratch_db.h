/* scratch_db.h — a directory of its own under /tmp with a database path in
 * it, for the unit tests that need files (cmocka setup and teardown).
 */
#ifndef ACEMQ_TEST_SCRATCH_DB_H
#define ACEMQ_TEST_SCRATCH_DB_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct scratch_db {
    char dir[64], path[96]; /* path: dir/app.db, not created */
} scratch_db;

/* *state becomes a scratch_db whose directory, named after tag, is new and empty. */
static inline int scratch_db_setup(void **state, const char *tag)
{
    scratch_db *f = calloc(1, sizeof *f);
    if (!f) return -1;
    snprintf(f->dir, sizeof f->dir, "/tmp/acemq-%s-XXXXXX", tag);
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    snprintf(f->path, sizeof f->path, "%s/app.db", f->dir);
    *state = f;
    return 0;
}

/* Removes every file in the directory, the directory (if a test has not
 * already) and the fixture. */
static inline int scratch_db_teardown(void **state)
{
    scratch_db *f = *state;
    DIR *d = opendir(f->dir);
    if (d) {
        const struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char p[384];
            snprintf(p, sizeof p, "%s/%s", f->dir, e->d_name);
            if (e->d_name[0] != '.') (void)unlink(p);
        }
        (void)closedir(d);
    }
    (void)rmdir(f->dir);
    free(f);
    return 0;
}

#endif
