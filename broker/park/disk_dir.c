/*
 * disk_dir.c - the disk tier's directory (disk_dir.h): its checks, the
 * scan for what a dead broker left, and the room left on its disk.
 */
#define _GNU_SOURCE
#include "disk_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

int gs_disk_dir_check(const char *dir, char *why, size_t whylen)
{
    if (!dir || dir[0] != '/') {
        snprintf(why, whylen, "park_disk_dir \"%s\" is not an absolute path", dir ? dir : "");
        return -1;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(why, whylen, "park_disk_dir %s cannot be made: %s", dir, strerror(errno));
        return -1;
    }
    struct stat st;
    if (lstat(dir, &st) != 0) {
        snprintf(why, whylen, "park_disk_dir %s: %s", dir, strerror(errno));
        return -1;
    }
    if (S_ISLNK(st.st_mode)) {
        snprintf(why, whylen, "park_disk_dir %s is a symbolic link (name the directory itself)",
                 dir);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, whylen, "park_disk_dir %s is not a directory", dir);
        return -1;
    }
    if (st.st_uid != geteuid()) {
        snprintf(why, whylen, "park_disk_dir %s belongs to uid %u, not to the broker's uid %u", dir,
                 (unsigned)st.st_uid, (unsigned)geteuid());
        return -1;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, whylen, "park_disk_dir %s is writable by others (mode %04o)", dir,
                 (unsigned)(st.st_mode & 07777));
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        snprintf(why, whylen, "park_disk_dir %s is not writable by the broker: %s", dir,
                 strerror(errno));
        return -1;
    }
    return 0;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n > t && strcmp(s + n - t, tail) == 0;
}

int gs_disk_dir_scan(const char *dir, const gs_disk_io_t *io, gs_disk_dir_found_fn found,
                     gs_disk_dir_dropped_fn dropped, void *arg, char *why, size_t whylen)
{
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(why, whylen, "park_disk_dir %s cannot be read: %s", dir, strerror(errno));
        return -1;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int tmp = ends_with(e->d_name, GS_DISK_TMP_SUFFIX);
        if (!tmp && !ends_with(e->d_name, GS_DISK_SUFFIX))
            continue;
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path)
            continue;
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue; /* not ours to judge: the directory is the broker's alone */
        char err[600] = "";
        gs_disk_file_t *f = NULL;
        if (tmp)
            snprintf(err, sizeof err, "half written by a broker that stopped");
        else
            f = gs_disk_file_open(path, io, err, sizeof err);
        if (f) {
            n++;
            found(arg, f);
            continue;
        }
        unlink(path);
        if (dropped)
            dropped(arg, path, err);
    }
    closedir(d);
    return n;
}

int gs_disk_dir_free(const char *dir, uint64_t *bytes, char *why, size_t whylen)
{
    struct statvfs v;
    if (statvfs(dir, &v) != 0) {
        snprintf(why, whylen, "park_disk_dir %s: %s", dir, strerror(errno));
        return -1;
    }
    *bytes = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
    return 0;
}
