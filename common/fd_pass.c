/*
 * fd_pass.c - datagrams with descriptors (fd_pass.h).
 */
#define _GNU_SOURCE
#include "fd_pass.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int gs_fd_send(int sock, const void *data, size_t len, const int *fds, int nfds)
{
    if (nfds < 0 || nfds > GS_FD_PASS_MAX) {
        errno = EINVAL;
        return -1;
    }
    union {
        char buf[CMSG_SPACE(sizeof(int) * GS_FD_PASS_MAX)];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {(void *)data, len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        mh.msg_control = control.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t n;
    do
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -1;
    if ((size_t)n != len) {
        errno = EMSGSIZE;
        return -1;
    }
    return 0;
}

ssize_t gs_fd_recv(int sock, void *buf, size_t len, int *fds, int maxfds, int *nfds)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * GS_FD_PASS_MAX)];
        struct cmsghdr align;
    } control;
    struct iovec iov = {buf, len};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = control.buf,
                        .msg_controllen = sizeof control.buf};
    *nfds = 0;
    ssize_t n;
    do
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof fd);
            if (*nfds < maxfds)
                fds[(*nfds)++] = fd;
            else
                close(fd); /* more than asked for: never leak them */
        }
    }
    if (mh.msg_flags & MSG_CTRUNC) { /* descriptors lost in transit: useless */
        for (int i = 0; i < *nfds; i++)
            close(fds[i]);
        *nfds = 0;
        errno = EMSGSIZE;
        return -1;
    }
    return n;
}
