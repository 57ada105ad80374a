/*
 * swap_fetch.c - one request on the pool socket (swap_fetch.h).
 */
#define _GNU_SOURCE
#include "swap_fetch.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fd_pass.h"

static void close_all(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

int gs_swap_fetch(const char *path, uint64_t lease, int *fds, int max, uint64_t *chunk_bytes,
                  int timeout_ms, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "pool socket path too long");
        return -1;
    }
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof sa) < 0) {
        snprintf(err, errlen, "pool socket %s: %s", path, strerror(errno));
        if (s >= 0)
            close(s);
        return -1;
    }
    char req[64];
    int len = snprintf(req, sizeof req, "{\"lease\":%llu}", (unsigned long long)lease);
    int got = 0, total = -1;
    if (gs_fd_send(s, req, (size_t)len, NULL, 0) < 0) {
        snprintf(err, errlen, "pool socket: %s", strerror(errno));
        goto fail;
    }
    while (total < 0 || got < total) {
        struct pollfd p = {s, POLLIN, 0};
        if (poll(&p, 1, timeout_ms) != 1) {
            snprintf(err, errlen, "the broker did not answer for the host memory in %d ms",
                     timeout_ms);
            goto fail;
        }
        char buf[512];
        int n = 0;
        ssize_t k = gs_fd_recv(s, buf, sizeof buf - 1, fds + got, max - got, &n);
        if (k <= 0) {
            snprintf(err, errlen, "pool socket closed before the host memory came");
            goto fail;
        }
        got += n;
        buf[k] = '\0';
        json_t *o = json_loads(buf, 0, NULL);
        const char *e = NULL;
        json_int_t chunks = -1, cb = 0, count = -1;
        if (o && json_unpack(o, "{s:s}", "error", &e) == 0) {
            snprintf(err, errlen, "%s", e);
            json_decref(o);
            goto fail;
        }
        if (!o ||
            json_unpack(o, "{s:I,s:I,s:I}", "chunks", &chunks, "chunk_bytes", &cb, "count",
                        &count) != 0 ||
            count != n || chunks < 0 || chunks > max || cb <= 0) {
            snprintf(err, errlen, "bad answer from the pool socket");
            json_decref(o);
            goto fail;
        }
        json_decref(o);
        total = (int)chunks;
        *chunk_bytes = (uint64_t)cb;
    }
    close(s);
    return got;
fail:
    close_all(fds, got);
    close(s);
    return -1;
}
