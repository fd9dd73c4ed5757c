/* prefault.h — bringing fresh anonymous memory in before its first touch.
 *
 * A page of a fresh mapping costs nothing until it is first written; then
 * the kernel stops the writer, finds a page and zeroes it. On the virtual
 * machines the project is measured on that zeroing runs at about 1 GB/s and
 * streams through the shared cache, evicting what the writer needed. A
 * memory store opened with presize=1 pays that at open instead, through
 * MADV_POPULATE_WRITE (Linux 5.14 and later), which faults the pages in as
 * writes would. Past the memory there is, it meets the out-of-memory killer
 * as those writes would (inside a memory cgroup its limit's killer ends the
 * process), so a caller about to fault in much asks memory_room.h first.
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
