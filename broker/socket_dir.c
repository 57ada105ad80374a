/*
 * socket_dir.c - see socket_dir.h.
 */
#include "socket_dir.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "endpoint.h"
#include "socket_trust.h"

static int mkdir_p(char *dir, mode_t mode)
{
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(dir, 0755);
        *p = '/';
        if (rc != 0 && errno != EEXIST)
            return -1;
    }
    if (mkdir(dir, mode) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

mode_t gs_socket_mode(int system, gid_t group)
{
    return !system ? 0600 : group != (gid_t)-1 ? 0660 : 0666;
}

/* 1 when something accepts connections on path, 0 when not. */
static int socket_is_live(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int live = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return live;
}

int gs_socket_dir_prepare(const char *path, int system, gid_t group, char *err, size_t errlen)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) {
        snprintf(err, errlen, "socket path \"%s\" must be absolute and inside a directory", path);
        return -1;
    }
    *slash = '\0';
    /* The group may enter the directory, never write to it. */
    mode_t mode = system ? (group != (gid_t)-1 ? 0750 : 0755) : 0700;
    struct stat st;
    int existed = stat(dir, &st) == 0;
    if (!existed && mkdir_p(dir, mode) != 0) {
        snprintf(err, errlen, "cannot create socket directory %s: %s", dir, strerror(errno));
        return -1;
    }
    /* Only a directory we made gets our mode; an admin's existing one (say
     * systemd's RuntimeDirectory) keeps the mode they chose, if it is safe.
     * One that someone else made in the meantime is not ours to change. */
    if (!existed && lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid()) {
        if (chmod(dir, mode) != 0 || (group != (gid_t)-1 && chown(dir, (uid_t)-1, group) != 0)) {
            snprintf(err, errlen, "cannot set permissions on %s: %s", dir, strerror(errno));
            return -1;
        }
    }
    char why[400];
    if (gs_trust_path(path, !system && gs_endpoint_is_user_socket(path), why, sizeof why) != 0) {
        snprintf(err, errlen, "refusing to listen on %s: %s", path, why);
        return -1;
    }
    if (lstat(path, &st) == 0) {
        if (socket_is_live(path)) {
            snprintf(err, errlen, "another broker is already listening on %s", path);
            return -1;
        }
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errlen, "%s exists and is not a socket; refusing to replace it", path);
            return -1;
        }
        if (st.st_uid != geteuid()) {
            snprintf(err, errlen,
                     "refusing to remove the stale socket %s: it belongs to uid %u, not to this "
                     "broker's user",
                     path, (unsigned)st.st_uid);
            return -1;
        }
        unlink(path); /* stale: its broker died without cleaning up */
    }
    return 0;
}
