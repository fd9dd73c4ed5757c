/* prefault.h — bringing fresh anonymous memory in before its first touch.
 *
 * A page of a fresh mapping costs nothing until it is first written; then
 * the kernel stops the writer, finds a page and zeroes it, streaming
 * through the shared cache and evicting what the writer needed. The memory
 * store's populator (os/populator.h) pays that ahead of the writer, on a
 * thread of its own, through MADV_POPULATE_WRITE (Linux 5.14 and later),
 * which faults the pages in as writes would, and meets the out-of-memory
 * killer past the memory there is as those writes would.
 */
#ifndef ACEMQ_OS_PREFAULT_H
#define ACEMQ_OS_PREFAULT_H

#include <stddef.h>

/* Faults in every page under [p, p + size) of a private anonymous mapping
 * that is readable and writable, as a write to each would (the bytes do
 * not change). 0, or -1 with errno set (ENOMEM: not enough memory, or part
 * of the range not mapped). On a kernel or system without
 * MADV_POPULATE_WRITE it does nothing and returns 0: the pages then come on
 * first touch, as without it. (That kernel's EINVAL cannot be told from the
 * one for a range that is not writable, which callers never pass.) */
int acemq__prefault(void *p, size_t size);

#endif
