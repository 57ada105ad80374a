/*
 * host_meminfo.c - the machine's host memory as the kernel tells it
 * (host_meminfo.h).
 */
#include "host_meminfo.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "MemTotal:  131891792 kB" lines; 0 when the key is not there. */
static int meminfo_key(const char *text, const char *key, uint64_t *out)
{
    size_t n = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, key, n) && l[n] == ':') {
            char *end;
            unsigned long long kb = strtoull(l + n + 1, &end, 10);
            if (end == l + n + 1)
                return 0;
            *out = (uint64_t)kb * 1024;
            return 1;
        }
    return 0;
}

static int read_text(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = 0;
    return 0;
}

/* memory.max ("max" or bytes) and memory.current of one cgroup directory:
 * 1 when it has a limit. */
static int cgroup_limit(const char *dir, uint64_t *max, uint64_t *cur)
{
    char path[640], buf[64];
    snprintf(path, sizeof path, "%s/memory.max", dir);
    if (read_text(path, buf, sizeof buf) != 0 || !strncmp(buf, "max", 3))
        return 0;
    char *end;
    *max = strtoull(buf, &end, 10);
    if (end == buf)
        return 0;
    snprintf(path, sizeof path, "%s/memory.current", dir);
    *cur = 0;
    if (read_text(path, buf, sizeof buf) == 0)
        *cur = strtoull(buf, NULL, 10);
    return 1;
}

/* The tightest limit (and the room under it) from the cgroup named in a
 * /proc/<pid>/cgroup file up to the root: 1 when there is one. */
static int cgroup_walk(const char *cgroup_file, const char *root, uint64_t *limit, uint64_t *room)
{
    char buf[1024];
    if (!cgroup_file || read_text(cgroup_file, buf, sizeof buf) != 0)
        return 0;
    const char *v2 = strstr(buf, "0::"); /* the unified hierarchy's line */
    if (!v2 || (v2 != buf && v2[-1] != '\n'))
        return 0;
    char rel[512];
    snprintf(rel, sizeof rel, "%s", v2 + 3);
    rel[strcspn(rel, "\n")] = 0;
    int found = 0;
    for (;;) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s%s", root, rel);
        uint64_t max, cur;
        if (cgroup_limit(dir, &max, &cur)) {
            uint64_t left = max > cur ? max - cur : 0;
            if (!found || max < *limit)
                *limit = max;
            if (!found || left < *room)
                *room = left;
            found = 1;
        }
        char *slash = strrchr(rel, '/');
        if (!slash || slash == rel)
            break;
        *slash = 0;
    }
    return found;
}

int gs_host_meminfo_read(const char *meminfo, const char *cgroup_file, const char *cgroup_root,
                         gs_host_meminfo_t *out, char *err, size_t errlen)
{
    char text[8192];
    memset(out, 0, sizeof *out);
    if (read_text(meminfo, text, sizeof text) != 0) {
        snprintf(err, errlen, "cannot read %s", meminfo);
        return -1;
    }
    if (!meminfo_key(text, "MemTotal", &out->total) || !out->total) {
        snprintf(err, errlen, "%s has no MemTotal", meminfo);
        return -1;
    }
    /* Kernels before 3.14 have no MemAvailable: free + cached is close. */
    if (!meminfo_key(text, "MemAvailable", &out->available)) {
        uint64_t free_b = 0, cached = 0;
        meminfo_key(text, "MemFree", &free_b);
        meminfo_key(text, "Cached", &cached);
        out->available = free_b + cached;
    }
    uint64_t limit = 0, room = 0;
    if (cgroup_walk(cgroup_file, cgroup_root, &limit, &room)) {
        if (limit < out->total) {
            out->total = limit;
            out->cgroup = 1;
        }
        if (room < out->available) {
            out->available = room;
            out->cgroup = 1;
        }
    }
    return 0;
}

int gs_host_meminfo_now(gs_host_meminfo_t *out, char *err, size_t errlen)
{
    return gs_host_meminfo_read("/proc/meminfo", "/proc/self/cgroup", "/sys/fs/cgroup", out, err,
                                errlen);
}

uint64_t gs_host_meminfo_cgroup_room(long pid)
{
    char file[64];
    snprintf(file, sizeof file, "/proc/%ld/cgroup", pid);
    uint64_t limit = 0, room = 0;
    return cgroup_walk(file, "/sys/fs/cgroup", &limit, &room) ? room : UINT64_MAX;
}
