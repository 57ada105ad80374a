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

/* One answer of the pool socket, with the descriptors it carries (up to
 * max, *nfd of them): the JSON object, or NULL with err set (no answer in
 * timeout_ms, the socket closed, or the broker's own "error", whose
 * descriptors, if any, are closed).  `what`: what the answer is for. */
static json_t *answer(int s, int timeout_ms, int *fds, int max, int *nfd, const char *what,
                      char *err, size_t errlen)
{
    *nfd = 0;
    struct pollfd p = {s, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1) {
        snprintf(err, errlen, "the broker did not answer %s in %d ms", what, timeout_ms);
        return NULL;
    }
    char buf[512];
    ssize_t k = gs_fd_recv(s, buf, sizeof buf - 1, fds, max, nfd);
    if (k <= 0) {
        snprintf(err, errlen, "pool socket closed before it answered %s", what);
        return NULL;
    }
    buf[k] = '\0';
    json_t *o = json_loads(buf, 0, NULL);
    const char *e = NULL;
    if (o && json_unpack(o, "{s:s}", "error", &e) == 0) {
        snprintf(err, errlen, "%s", e);
        json_decref(o);
        close_all(fds, *nfd);
        *nfd = 0;
        return NULL;
    }
    if (!o)
        snprintf(err, errlen, "bad answer from the pool socket");
    return o;
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
        int n = 0;
        json_t *o =
            answer(s, timeout_ms, fds + got, max - got, &n, "for the host memory", err, errlen);
        got += n;
        if (!o)
            goto fail;
        json_int_t chunks = -1, cb = 0, count = -1, all = -1;
        if (json_unpack(o, "{s:I,s:I,s:I,s?I}", "chunks", &chunks, "chunk_bytes", &cb, "count",
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
        int nfd = 0;
        json_t *a = answer(s, timeout_ms, NULL, 0, &nfd, "the return", err, errlen);
        if (a) {
            rc = json_is_true(json_object_get(a, "ok")) ? 0 : -1;
            if (rc)
                snprintf(err, errlen, "bad answer from the pool socket");
            json_decref(a);
        }
    }
    if (s >= 0)
        close(s);
    free(req);
    return rc;
}
