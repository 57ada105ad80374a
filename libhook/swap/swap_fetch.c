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

static int connect_to(const char *path, char *err, size_t errlen)
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
    return s;
}

int gs_swap_fetch_from(const char *path, uint64_t lease, int from, int wait_ms, int *fds, int max,
                       uint64_t *chunk_bytes, int *want, int timeout_ms, char *err, size_t errlen)
{
    int s = connect_to(path, err, errlen);
    if (s < 0)
        return -1;
    char req[128];
    int len = snprintf(req, sizeof req, "{\"lease\":%llu,\"from\":%d,\"wait_ms\":%d}",
                       (unsigned long long)lease, from, wait_ms);
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
        json_int_t chunks = -1, cb = 0, count = -1, all = -1;
        if (o && json_unpack(o, "{s:s}", "error", &e) == 0) {
            snprintf(err, errlen, "%s", e);
            json_decref(o);
            goto fail;
        }
        if (!o ||
            json_unpack(o, "{s:I,s:I,s:I,s?I}", "chunks", &chunks, "chunk_bytes", &cb, "count",
                        &count, "want", &all) != 0 ||
            count != n || chunks < 0 || chunks > max || cb <= 0) {
            snprintf(err, errlen, "bad answer from the pool socket");
            json_decref(o);
            goto fail;
        }
        json_decref(o);
        total = (int)chunks;
        *chunk_bytes = (uint64_t)cb;
        if (want)
            *want = all >= 0 ? (int)all : from + (int)chunks; /* an older broker: all at once */
    }
    close(s);
    return got;
fail:
    close_all(fds, got);
    close(s);
    return -1;
}

int gs_swap_fetch(const char *path, uint64_t lease, int *fds, int max, uint64_t *chunk_bytes,
                  int timeout_ms, char *err, size_t errlen)
{
    return gs_swap_fetch_from(path, lease, 0, 0, fds, max, chunk_bytes, NULL, timeout_ms, err,
                              errlen);
}

int gs_swap_return(const char *path, uint64_t lease, const int *positions, int n, int timeout_ms,
                   char *err, size_t errlen)
{
    json_t *pos = json_array();
    for (int i = 0; pos && i < n; i++)
        json_array_append_new(pos, json_integer(positions[i]));
    json_t *o = pos ? json_pack("{s:I, s:o}", "return", (json_int_t)lease, "positions", pos) : NULL;
    char *req = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!req) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int s = connect_to(path, err, errlen), rc = -1;
    if (s >= 0 && gs_fd_send(s, req, strlen(req), NULL, 0) < 0)
        snprintf(err, errlen, "pool socket: %s", strerror(errno));
    else if (s >= 0) {
        struct pollfd p = {s, POLLIN, 0};
        char buf[512];
        int nfd = 0;
        ssize_t k =
            poll(&p, 1, timeout_ms) == 1 ? gs_fd_recv(s, buf, sizeof buf - 1, NULL, 0, &nfd) : -1;
        if (k <= 0)
            snprintf(err, errlen, "the broker did not answer the return in %d ms", timeout_ms);
        else {
            buf[k] = '\0';
            json_t *a = json_loads(buf, 0, NULL);
            const char *e = NULL;
            if (a && json_unpack(a, "{s:s}", "error", &e) == 0)
                snprintf(err, errlen, "%s", e);
            else
                rc = json_is_true(json_object_get(a, "ok")) ? 0 : -1;
            if (rc && !e)
                snprintf(err, errlen, "bad answer from the pool socket");
            json_decref(a);
        }
    }
    if (s >= 0)
        close(s);
    free(req);
    return rc;
}
