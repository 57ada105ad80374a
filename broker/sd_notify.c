/*
 * sd_notify.c - one datagram to the socket systemd names (see sd_notify(3)).
 */
#include "sd_notify.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int gs_sd_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 0;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if (len >= sizeof sa.sun_path || (path[0] != '/' && path[0] != '@'))
        return -1;
    memcpy(sa.sun_path, path, len);
    if (sa.sun_path[0] == '@') /* abstract namespace */
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
    close(fd);
    return n < 0 ? -1 : 1;
}
