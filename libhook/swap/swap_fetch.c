/*
 * swap_fetch.c - one request on the pool socket (swap_fetch.h), asked
 * again while the socket says it had no room for it.
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
#include <time.h>
#include <unistd.h>

#include "fd_pass.h"

static void close_all(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A connection to the pool socket, or -1 with err naming why.  connect(2)
 * waits while the broker's backlog is full: at most timeout_ms. */
static int connect_to(const char *path, int timeout_ms, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "pool socket path too long");
        return -1;
    }
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) {
        snprintf(err, errlen, "pool socket %s: %s", path, strerror(errno));
        return -1;
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(s, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = errno;
        if (e == EACCES || e == EPERM)
            snprintf(err, errlen,
                     "permission denied: cannot connect to the pool socket %s (not in the "
                     "broker's socket group, or a broker that keeps it to root?)",
                     path);
        else if (e == EAGAIN)
            snprintf(err, errlen, "pool socket %s: the broker accepted no connection in %d ms",
                     path, timeout_ms);
        else
            snprintf(err, errlen, "pool socket %s: %s", path, strerror(e));
        close(s);
        return -1;
    }
    return s;
}

/* One answer of the pool socket, with the descriptors it carries (up to
 * max, *nfd of them): the JSON object, or NULL with err set (no answer in
 * timeout_ms, the socket closed, or the broker's own "error", whose
 * descriptors, if any, are closed; *retry set when that error says asking
 * again may succeed).  `what`: what the answer is for. */
static json_t *answer(int s, int timeout_ms, int *fds, int max, int *nfd, const char *what,
                      int *retry, char *err, size_t errlen)
{
    *nfd = 0;
    *retry = 0;
    struct pollfd p = {s, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1) {
        snprintf(err, errlen, "the broker did not answer %s in %d ms", what, timeout_ms);
        return NULL;
    }
    char buf[512];
    ssize_t k = gs_fd_recv(s, buf, sizeof buf - 1, fds, max, nfd);
    if (k < 0 && errno == ECONNRESET) /* closed with our request unread: its answer may be queued */
        k = gs_fd_recv(s, buf, sizeof buf - 1, fds, max, nfd);
    if (k <= 0) {
        snprintf(err, errlen, "pool socket closed before it answered %s", what);
        return NULL;
    }
    buf[k] = '\0';
    json_t *o = json_loads(buf, 0, NULL);
    const char *e = NULL;
    if (o && json_unpack(o, "{s:s}", "error", &e) == 0) {
        snprintf(err, errlen, "%s", e);
        *retry = json_is_true(json_object_get(o, "retry"));
        json_decref(o);
        close_all(fds, *nfd);
        *nfd = 0;
        return NULL;
    }
    if (!o)
        snprintf(err, errlen, "bad answer from the pool socket");
    return o;
}

/* Connects, sends req and reads the first answer (into *out, with its
 * descriptors): the connected socket, or -1 with err set.  While the
 * socket answers that it had no room for the connection (or dropped it),
 * asks again, pausing a little longer each time, until timeout_ms is
 * spent: then err is its last reason. */
static int ask(const char *path, const char *req, int timeout_ms, int *fds, int max, int *nfd,
               json_t **out, const char *what, char *err, size_t errlen)
{
    int64_t end = now_ms() + timeout_ms;
    int pause_ms = 5;
    char busy[256] = ""; /* the last "no room" answer */
    for (;;) {
        int left = (int)(end - now_ms()), retry = 0;
        int s = connect_to(path, left > 1 ? left : 1, err, errlen);
        if (s < 0)
            return -1;
        if (gs_fd_send(s, req, strlen(req), NULL, 0) < 0) {
            /* Closed on us: the reason it gave, if any, waits to be read. */
            int e = errno;
            *out = answer(s, 0, fds, max, nfd, what, &retry, err, errlen);
            if (!*out && !retry)
                snprintf(err, errlen,
                         "the pool socket %s closed the connection before the request: %s", path,
                         strerror(e));
        } else
            *out = answer(s, left > 1 ? left : 1, fds, max, nfd, what, &retry, err, errlen);
        if (*out)
            return s;
        close(s);
        left = (int)(end - now_ms());
        if (retry)
            snprintf(busy, sizeof busy, "%s", err);
        else if (busy[0] && left <= 0) /* out of time while it had no room: that is why */
            snprintf(err, errlen, "%s", busy);
        if (!retry || left <= pause_ms)
            return -1;
        poll(NULL, 0, pause_ms);
        pause_ms = pause_ms < 100 ? 2 * pause_ms : 200;
    }
}

int gs_swap_fetch_from(const char *path, uint64_t lease, int from, int wait_ms, int *fds, int max,
                       uint64_t *chunk_bytes, int *want, int timeout_ms, char *err, size_t errlen)
{
    char req[128];
    snprintf(req, sizeof req, "{\"lease\":%llu,\"from\":%d,\"wait_ms\":%d}",
             (unsigned long long)lease, from, wait_ms);
    static const char what[] = "for the host memory";
    int n = 0, got = 0, total = -1, retry;
    json_t *o = NULL;
    int s = ask(path, req, timeout_ms, fds, max, &n, &o, what, err, errlen);
    if (s < 0)
        return -1;
    for (;;) {
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
        if (got >= total)
            break;
        o = answer(s, timeout_ms, fds + got, max - got, &n, what, &retry, err, errlen);
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
    int nfd = 0, rc = -1;
    json_t *a = NULL;
    int s = ask(path, req, timeout_ms, NULL, 0, &nfd, &a, "the return", err, errlen);
    if (a) {
        rc = json_is_true(json_object_get(a, "ok")) ? 0 : -1;
        if (rc)
            snprintf(err, errlen, "bad answer from the pool socket");
        json_decref(a);
    }
    if (s >= 0)
        close(s);
    free(req);
    return rc;
}
