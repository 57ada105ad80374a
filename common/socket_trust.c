/*
 * socket_trust.c - see socket_trust.h.
 *
 * The path walk follows OpenSSH's safe_path: every directory on the way
 * must be unwritable by anyone but a trusted owner, because whoever can
 * write to a directory can rename what is below it.  It is done on the
 * path as given (lstat, so a symlink's own owner counts) and on the path
 * with its symlinks resolved (what connect(2) really reaches).
 */
#define _GNU_SOURCE
#include "socket_trust.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* The service account's uid from GPUSHARE_BROKER_USER; -1 when unset or
 * naming no one. */
static long service_uid(void)
{
    const char *who = getenv("GPUSHARE_BROKER_USER");
    if (!who || !*who)
        return -1;
    char *end;
    unsigned long n = strtoul(who, &end, 10);
    if (!*end)
        return n <= 0xfffffffeUL ? (long)n : -1;
    struct passwd pw, *found = NULL;
    char buf[1024];
    if (getpwnam_r(who, &pw, buf, sizeof buf, &found) != 0 || !found)
        return -1;
    return (long)found->pw_uid;
}

int gs_trust_uid(uid_t uid)
{
    return uid == 0 || uid == getuid() || uid == geteuid() || (long)uid == service_uid();
}

static void user_name(uid_t uid, char *out, size_t len)
{
    struct passwd pw, *found = NULL;
    char buf[1024];
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found)
        snprintf(out, len, "uid %u (%s)", (unsigned)uid, found->pw_name);
    else
        snprintf(out, len, "uid %u", (unsigned)uid);
}

static void group_name(gid_t gid, char *out, size_t len)
{
    struct group gr, *found = NULL;
    char buf[1024];
    if (getgrgid_r(gid, &gr, buf, sizeof buf, &found) == 0 && found)
        snprintf(out, len, "%s", found->gr_name);
    else
        snprintf(out, len, "%u", (unsigned)gid);
}

static int untrusted_owner(const char *what, const char *path, uid_t uid, char *err, size_t errlen)
{
    char who[96];
    user_name(uid, who, sizeof who);
    snprintf(err, errlen,
             "%s %s belongs to %s, not to you, root or the broker's service account "
             "(GPUSHARE_BROKER_USER)",
             what, path, who);
    return -1;
}

/* Directory dir (with child, the next path entry below it) may be trusted:
 * lst is its lstat. */
static int check_dir(const char *dir, const struct stat *lst, const char *child, char *err,
                     size_t errlen)
{
    if (S_ISLNK(lst->st_mode)) /* the resolved path is walked too */
        return gs_trust_uid(lst->st_uid)
                   ? 0
                   : untrusted_owner("symlink", dir, lst->st_uid, err, errlen);
    if (!S_ISDIR(lst->st_mode)) {
        snprintf(err, errlen, "%s is not a directory", dir);
        return -1;
    }
    if (!gs_trust_uid(lst->st_uid))
        return untrusted_owner("directory", dir, lst->st_uid, err, errlen);
    if (!(lst->st_mode & (S_IWGRP | S_IWOTH)))
        return 0;
    if (!(lst->st_mode & S_ISVTX)) {
        snprintf(err, errlen,
                 "directory %s is writable by others (mode %04o): anyone who may write there "
                 "could replace the broker's socket",
                 dir, (unsigned)(lst->st_mode & 07777));
        return -1;
    }
    /* Sticky (/tmp): only an entry's owner may remove or rename it, so what
     * matters is who owns the entry below. */
    struct stat cst;
    if (lstat(child, &cst) == 0 && !gs_trust_uid(cst.st_uid))
        return untrusted_owner(S_ISDIR(cst.st_mode) ? "directory" : "file", child, cst.st_uid, err,
                               errlen);
    return 0;
}

/* Walk every prefix of the absolute directory path dir, down to dir itself
 * (whose child is leaf). */
static int walk(const char *dir, const char *leaf, char *err, size_t errlen)
{
    char prefix[PATH_MAX], child[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof prefix || dir[0] != '/') {
        snprintf(err, errlen, "cannot check %s: not an absolute path", dir);
        return -1;
    }
    size_t end = 1; /* "/" first */
    for (;;) {
        memcpy(prefix, dir, end);
        prefix[end] = '\0';
        size_t next = end;
        while (next < n && dir[next] == '/')
            next++;
        while (next < n && dir[next] != '/')
            next++;
        int last = next <= end || (end >= n);
        if (last)
            snprintf(child, sizeof child, "%s", leaf);
        else {
            memcpy(child, dir, next);
            child[next] = '\0';
        }
        struct stat st;
        if (lstat(prefix, &st) != 0) {
            snprintf(err, errlen, "cannot check %s: %s", prefix, strerror(errno));
            return -1;
        }
        if (check_dir(prefix, &st, child, err, errlen) != 0)
            return -1;
        if (last)
            return 0;
        end = next;
    }
}

int gs_trust_path(const char *path, int private_dir, char *err, size_t errlen)
{
    char abs[PATH_MAX], real[PATH_MAX];
    if (path[0] == '/')
        snprintf(abs, sizeof abs, "%s", path);
    else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) {
            snprintf(err, errlen, "cannot check %s: %s", path, strerror(errno));
            return -1;
        }
        int n = snprintf(abs, sizeof abs, "%s/%s", cwd, path);
        if (n < 0 || (size_t)n >= sizeof abs) {
            snprintf(err, errlen, "cannot check %s: path too long", path);
            return -1;
        }
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", abs);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    if (walk(dir, abs, err, errlen) != 0)
        return -1;
    if (!realpath(dir, real)) {
        snprintf(err, errlen, "cannot check %s: %s", dir, strerror(errno));
        return -1;
    }
    char leaf[PATH_MAX];
    int n =
        snprintf(leaf, sizeof leaf, "%s/%s", strcmp(real, "/") ? real : "", strrchr(abs, '/') + 1);
    if (n < 0 || (size_t)n >= sizeof leaf) {
        snprintf(err, errlen, "cannot check %s: path too long", real);
        return -1;
    }
    if (strcmp(real, dir) != 0 && walk(real, leaf, err, errlen) != 0)
        return -1;
    struct stat st;
    if (private_dir) {
        if (stat(real, &st) != 0) {
            snprintf(err, errlen, "cannot check %s: %s", real, strerror(errno));
            return -1;
        }
        if ((st.st_uid != getuid() && st.st_uid != geteuid()) || (st.st_mode & 077)) {
            char who[96];
            user_name(st.st_uid, who, sizeof who);
            snprintf(err, errlen,
                     "the per-user socket directory %s must be yours with mode 0700, but "
                     "belongs to %s with mode %04o",
                     real, who, (unsigned)(st.st_mode & 07777));
            return -1;
        }
    }
    if (lstat(abs, &st) == 0 && !gs_trust_uid(st.st_uid))
        return untrusted_owner("socket", abs, st.st_uid, err, errlen);
    return 0;
}

/* Why connect(2) said EACCES, from the socket's mode and group. */
static void denied_hint(const struct stat *st, char *out, size_t len)
{
    char g[64];
    group_name(st->st_gid, g, sizeof g);
    if ((st->st_mode & 0020) && !(st->st_mode & 0002))
        snprintf(out, len, "not in group %s?", g);
    else
        snprintf(out, len, "socket mode %04o, group %s", (unsigned)(st->st_mode & 07777), g);
}

gs_probe_t gs_trust_probe(const char *path, int private_dir, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) {
            snprintf(err, errlen,
                     "no broker is running at ipc://%s (no socket file; is gpushare-broker "
                     "started?)",
                     path);
            return GS_PROBE_ABSENT;
        }
        if (errno == EACCES) {
            snprintf(err, errlen,
                     "permission denied: cannot reach %s (a directory on the way is closed "
                     "to you)",
                     path);
            return GS_PROBE_DENIED;
        }
        snprintf(err, errlen, "cannot use %s: %s", path, strerror(errno));
        return GS_PROBE_ERROR;
    }
    char why[400];
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "%s is not a socket", path);
        return GS_PROBE_UNTRUSTED;
    }
    if (gs_trust_path(path, private_dir, why, sizeof why) != 0) {
        snprintf(err, errlen, "refusing the broker socket %s: %s", path, why);
        return GS_PROBE_UNTRUSTED;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "%s is too long for a unix socket", path);
        return GS_PROBE_ERROR;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "cannot make a socket: %s", strerror(errno));
        return GS_PROBE_ERROR;
    }
    gs_probe_t r = GS_PROBE_OK;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        if (e == EACCES || e == EPERM) {
            char hint[128];
            denied_hint(&st, hint, sizeof hint);
            snprintf(err, errlen, "permission denied: cannot connect to %s (%s)", path, hint);
            r = GS_PROBE_DENIED;
        } else if (e == ECONNREFUSED) {
            snprintf(err, errlen,
                     "broker not running (stale socket %s, left by a broker that stopped "
                     "without removing it)",
                     path);
            r = GS_PROBE_STALE;
        } else if (e != EAGAIN && e != EINPROGRESS) {
            /* EAGAIN: its backlog is full; someone listens, and the welcome's
             * credentials are checked all the same (gs_trust_peer) */
            snprintf(err, errlen, "cannot connect to %s: %s", path, strerror(e));
            r = GS_PROBE_ERROR;
        }
        close(fd);
        return r;
    }
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && !gs_trust_uid(cred.uid)) {
        char who[96];
        user_name(cred.uid, who, sizeof who);
        snprintf(err, errlen,
                 "refusing the broker at %s: it runs as %s, not as you, root or the service "
                 "account (GPUSHARE_BROKER_USER)",
                 path, who);
        r = GS_PROBE_UNTRUSTED;
    }
    close(fd);
    return r;
}

int gs_trust_peer(const gs_peer_t *peer, const char *endpoint, char *err, size_t errlen)
{
    if (!peer->valid) {
        snprintf(err, errlen, "refusing the broker at %s: its messages carry no credentials",
                 endpoint);
        return -1;
    }
    if (gs_trust_uid(peer->uid))
        return 0;
    char who[96];
    user_name(peer->uid, who, sizeof who);
    snprintf(err, errlen,
             "refusing the broker at %s: it runs as %s, not as you, root or the service account "
             "(GPUSHARE_BROKER_USER)",
             endpoint, who);
    return -1;
}
