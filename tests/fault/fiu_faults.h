/* fiu_faults.h — libc calls failed at random, from inside a test, through
 * libfiu's POSIX preload library (Debian's libfiu-dev, fiu-utils).
 *
 * fiu_posix_preload.so wraps malloc, write, fsync, send and the like; each
 * wrapper asks libfiu whether to fail. The test enables the points it wants
 * (fiu_enable_external) around one call of the library under test and
 * disables them again before it looks at the outcome, so cmocka's own work
 * and the checks never meet a fault. The decision is taken here, from a
 * seeded generator, so a run is reproduced from its seed, and each point
 * counts what it injected.
 *
 * The preload must be in place before the process starts:
 * fiu_faults_start() re-executes the test with LD_PRELOAD set when it is
 * not. Under AddressSanitizer ASan's runtime must come before it (ASan
 * initialises, and allocates, before any preloaded constructor has run, so a
 * preload in front of it crashes), and ASan's allocator then answers malloc
 * itself: the memory points are found dead by a probe and reported as not
 * injected, while the I/O points still are (ASan's interceptors of write,
 * pread, send... call on to the next definition, the preload's).
 */
#ifndef FIU_FAULTS_H
#define FIU_FAULTS_H

#include <stddef.h>
#include <stdint.h>

/* What the points fail: memory (malloc, calloc, realloc: ENOMEM), file I/O
 * (write, pwrite, writev: ENOSPC or EIO; fsync, fdatasync: EIO; read,
 * pread: EIO) and sockets (send, recv and friends: ECONNRESET). */
enum {
    FIU_MEM = 1u << 0,
    FIU_FILE = 1u << 1,
    FIU_NET = 1u << 2,
    FIU_ALL = FIU_MEM | FIU_FILE | FIU_NET
};

/* Re-executes argv with the preload when it is missing (returns only when
 * it is in place), seeds the generator (FIU_SEED from the environment, else
 * seed) and probes the memory points. Prints the seed and what is live. */
void fiu_faults_start(char **argv, uint64_t seed);

/* errno e as the failinfo libfiu's POSIX wrappers set errno from. */
void *fiu_faults_errno(int e);

/* Reseeds the generator: each test starts from a seed of its own. */
void fiu_faults_seed(uint64_t seed);

/* The next number of the seeded generator (for the test's own choices). */
uint64_t fiu_faults_next(void);

/* Enables the points of kinds (FIU_* bits; dead ones are left out), each
 * failing a call with probability p. */
void fiu_faults_on(unsigned kinds, double p);
/* Disables every point. */
void fiu_faults_off(void);

/* 1 when the memory points are live (not under ASan's allocator). */
int fiu_faults_mem_live(void);

/* Failures injected so far, all points together. */
uint64_t fiu_faults_injected(void);
/* "malloc=12 write=3 ..." for the points that injected anything. */
void fiu_faults_summary(char *buf, size_t cap);

/* The number of iterations: FIU_ITERATIONS from the environment, else def. */
int fiu_faults_iterations(int def);

#endif
