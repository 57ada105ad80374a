/*
 * host_meminfo.h - how much host memory the machine has and has free, as
 * the kernel tells it: /proc/meminfo (MemTotal, MemAvailable) and, where
 * the broker runs in a cgroup (v2) with a memory limit (a systemd slice,
 * a container, a JupyterHub's), that limit and what the cgroup uses, the
 * tightest one on the way up to the root.  The ledger (host_ledger.h)
 * turns it into room for parked memory.
 */
#ifndef GS_HOST_MEMINFO_H
#define GS_HOST_MEMINFO_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t total;     /* MemTotal, or the cgroup's limit where lower */
    uint64_t available; /* MemAvailable, or the cgroup's limit less its use where lower */
    int cgroup;         /* a cgroup's limit decided one of them */
} gs_host_meminfo_t;

/* Reads meminfo (a /proc/meminfo) and the cgroup of the process whose
 * /proc/<pid>/cgroup is at cgroup_file (NULL: none), cgroup v2 files under
 * cgroup_root (/sys/fs/cgroup).  0, or -1 with err naming what could not
 * be read (meminfo unreadable or without MemTotal; a missing cgroup is not
 * an error). */
int gs_host_meminfo_read(const char *meminfo, const char *cgroup_file, const char *cgroup_root,
                         gs_host_meminfo_t *out, char *err, size_t errlen);

/* The machine's own: /proc/meminfo, /proc/self/cgroup, /sys/fs/cgroup. */
int gs_host_meminfo_now(gs_host_meminfo_t *out, char *err, size_t errlen);

/* The room left in the cgroup of process pid (memory.max less
 * memory.current, the tightest on the way up; UINT64_MAX: no limit or no
 * cgroup v2), for a checkpoint image, which the driver puts in the parked
 * process' own memory and so counts against its cgroup, not the broker's. */
uint64_t gs_host_meminfo_cgroup_room(long pid);

#endif
