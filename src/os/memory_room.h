/* memory_room.h — how much more memory this process can take before the
 * kernel's out-of-memory killer comes for it.
 *
 * Two things bound it: the machine's available memory (MemAvailable in
 * /proc/meminfo: free pages plus the page cache the kernel can drop), and
 * the limit of every memory cgroup the process sits in, on cgroup v1 or v2,
 * its own and its ancestors'. A cgroup's room is its limit less what it
 * holds that cannot be reclaimed (its usage less its file pages). Inside a
 * cgroup, memory faulted in past its limit does not fail with ENOMEM: the
 * cgroup's OOM killer ends the process, even for MADV_POPULATE_WRITE (seen
 * on Linux 6.18), so a caller that is about to fault in a lot asks here
 * first.
 *
 * The figure is a snapshot: other processes allocate too. It is meant to
 * refuse what cannot fit, not to promise that what fits will.
 */
#ifndef ACEMQ_OS_MEMORY_ROOM_H
#define ACEMQ_OS_MEMORY_ROOM_H

#include <stddef.h>

typedef struct acemq__memory_room {
    size_t bytes;    /* SIZE_MAX when nothing says */
    char bound[256]; /* what sets bytes, for an error message; "" if nothing */
} acemq__memory_room;

/* Bytes of physical memory, or 0 when the system does not say. */
size_t acemq__physical_memory(void);

/* The room now, from /proc/meminfo, /proc/self/cgroup and /sys/fs/cgroup. */
void acemq__memory_room_get(acemq__memory_room *out);

/* The same from other files (tests): meminfo as /proc/meminfo,
 * proc_cgroup as /proc/self/cgroup, cgroup_root where the hierarchies
 * are mounted (v1's memory controller at cgroup_root/memory, v2 at
 * cgroup_root itself or, on a hybrid system, cgroup_root/unified).
 * A file that is missing or does not parse bounds nothing. */
void acemq__memory_room_at(const char *meminfo, const char *proc_cgroup, const char *cgroup_root,
                           acemq__memory_room *out);

#endif
