/*
 * pool_socket.c - the listener and its short-lived connections
 * (pool_socket.h), shared out between users by conn_caps.h.
 */
#define _GNU_SOURCE
#include "pool_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "conn_caps.h"
#include "fd_pass.h"

#define MAX_CHUNKS_SERVED 4096
#define MAX_WAIT_MS       1000 /* a request for a growing lease waits at most this */

struct conn {
    int fd; /* -1: free slot */
    int64_t since_ms;
    pid_t pid;
    uid_t uid;
    int waiting; /* a fetch answered when its lease has grown (or at until_ms) */
    int64_t until_ms;
    uint64_t lease;
    int from;
};

struct gs_pool_socket {
    int listen_fd;
    char path[108];
    gs_conn_caps_t caps;
    uid_t self_uid; /* trusted, as root (conn_caps.h) */
    struct conn conn[GS_POOL_SOCKET_MAX_CONN];
};

gs_pool_socket_t *gs_pool_socket_new(const char *path, mode_t mode, gid_t group, char *err,
                                     size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "pool socket path too long: %s", path);
        return NULL;
    }
    gs_pool_socket_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (int i = 0; i < GS_POOL_SOCKET_MAX_CONN; i++)
        self->conn[i].fd = -1;
    self->caps = gs_conn_caps_make(GS_POOL_SOCKET_MAX_CONN, GS_POOL_SOCKET_PER_UID);
    self->self_uid = geteuid();
    snprintf(self->path, sizeof self->path, "%s", path);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    self->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (self->listen_fd < 0)
        goto fail;
    unlink(path); /* ours: the broker's directory was checked before (socket_dir.c) */
    /* Created for the owner alone, then given its group and only then its
     * mode: no moment in which others could connect.  (Without the group,
     * the service's users could not fetch their memory back: issue 34.) */
    mode_t old = umask(0177);
    int rc = bind(self->listen_fd, (struct sockaddr *)&sa, sizeof sa);
    umask(old);
    if (rc < 0 || (group != (gid_t)-1 && chown(path, (uid_t)-1, group) < 0) ||
        chmod(path, mode) < 0 || listen(self->listen_fd, 64) < 0)
        goto fail;
    return self;
fail:
    snprintf(err, errlen, "pool socket %s: %s", path, strerror(errno));
    if (self->listen_fd >= 0)
        close(self->listen_fd);
    free(self);
    return NULL;
}

static void drop(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

void gs_pool_socket_destroy(gs_pool_socket_t **self_p)
{
    gs_pool_socket_t *self = self_p ? *self_p : NULL;
    if (!self)
        return;
    for (int i = 0; i < GS_POOL_SOCKET_MAX_CONN; i++)
        drop(&self->conn[i]);
    close(self->listen_fd);
    unlink(self->path);
    free(self);
    *self_p = NULL;
}

int gs_pool_socket_poll_items(gs_pool_socket_t *self, zmq_pollitem_t *items, int max)
{
    int n = 0;
    if (n < max)
        items[n++] = (zmq_pollitem_t){NULL, self->listen_fd, ZMQ_POLLIN, 0};
    for (int i = 0; i < GS_POOL_SOCKET_MAX_CONN && n < max; i++)
        if (self->conn[i].fd >= 0)
            items[n++] = (zmq_pollitem_t){NULL, self->conn[i].fd, ZMQ_POLLIN, 0};
    return n;
}

static void send_error(int fd, const char *msg, int retry)
{
    json_t *o = json_pack("{s:s, s:b}", "error", msg, "retry", retry);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (s)
        gs_fd_send(fd, s, strlen(s), NULL, 0);
    free(s);
    json_decref(o);
}

static void answer_error(int fd, const char *msg)
{
    send_error(fd, msg, 0);
}

/* Whether a connection of uid may have a slot; when not, why, for it. */
static int admit(const gs_pool_socket_t *self, uid_t uid, struct conn **slot, char *why, size_t len)
{
    int trusted = gs_conn_caps_trusted(uid, self->self_uid);
    int mine = 0, users = 0, all = 0;
    *slot = NULL;
    for (int i = 0; i < GS_POOL_SOCKET_MAX_CONN; i++) {
        const struct conn *c = &self->conn[i];
        if (c->fd < 0) {
            if (!*slot)
                *slot = (struct conn *)c;
            continue;
        }
        all++;
        mine += c->uid == uid;
        users += !gs_conn_caps_trusted(c->uid, self->self_uid);
    }
    switch (gs_conn_caps_admit(&self->caps, trusted, mine, users, all)) {
    case GS_CONN_ADMIT:
        return 1;
    case GS_CONN_OVER_UID:
        snprintf(why, len,
                 "the pool socket is busy: uid %u has %d requests open already, the most one "
                 "user may have at once; try again",
                 (unsigned)uid, mine);
        break;
    case GS_CONN_OVER_USERS:
        snprintf(why, len,
                 "the pool socket is busy: users have %d requests open, all it takes from users "
                 "(%d more are kept for root); try again",
                 users, self->caps.reserved);
        break;
    case GS_CONN_FULL:
        snprintf(why, len, "the pool socket is busy: %d requests open, all it takes; try again",
                 all);
        break;
    }
    return 0;
}

static void accept_all(gs_pool_socket_t *self, int64_t now_ms)
{
    for (;;) {
        int fd = accept4(self->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN, or out of descriptors: the rest wait in the backlog */
        struct ucred cred;
        socklen_t len = sizeof cred;
        struct conn *slot = NULL;
        char why[200] = "the pool socket cannot tell who is asking";
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
            !admit(self, cred.uid, &slot, why, sizeof why)) {
            /* Answered, not just closed: the client reads this after its
             * request meets the closed socket, and tries again.  Its
             * request, if here already, is read first: closing over unread
             * data would make the client's next read fail (ECONNRESET). */
            char junk[512];
            while (recv(fd, junk, sizeof junk, MSG_DONTWAIT) > 0)
                ;
            send_error(fd, why, 1);
            close(fd);
            continue;
        }
        *slot = (struct conn){.fd = fd, .since_ms = now_ms, .pid = cred.pid, .uid = cred.uid};
    }
}

static void answer_chunks(struct conn *c, const int *out, int k, uint64_t chunk_bytes, int want)
{
    /* The answer is a few datagrams of a few hundred bytes: the socket's
     * buffer takes them without blocking. */
    for (int first = 0; first < k || (k == 0 && first == 0); first += GS_FD_PASS_MAX) {
        int count = k - first < GS_FD_PASS_MAX ? k - first : GS_FD_PASS_MAX;
        char head[200];
        int len = snprintf(head, sizeof head,
                           "{\"lease\":%llu,\"chunk_bytes\":%llu,\"chunks\":%d,\"first\":%d,"
                           "\"count\":%d,\"want\":%d}",
                           (unsigned long long)c->lease, (unsigned long long)chunk_bytes, k, first,
                           count, want);
        if (gs_fd_send(c->fd, head, (size_t)len, out + first, count) < 0)
            break;
        if (k == 0)
            break;
    }
}

/* Serves the fetch c waits for; 1 when it was answered (or refused). */
static int serve_fetch(struct conn *c, int64_t now_ms, gs_pool_serve_fn serve, void *arg)
{
    gs_pool_request_t r = {
        .pid = c->pid, .uid = c->uid, .lease = c->lease, .now_us = now_ms * 1000, .from = c->from};
    static int out[MAX_CHUNKS_SERVED];
    uint64_t chunk_bytes = 0;
    int want = 0;
    char err[200] = "";
    int k = serve(arg, &r, out, MAX_CHUNKS_SERVED, &chunk_bytes, &want, err, sizeof err);
    if (k == GS_POOL_LATER && now_ms < c->until_ms) {
        c->waiting = 1;
        return 0;
    }
    c->waiting = 0;
    if (k == GS_POOL_LATER)
        answer_chunks(c, out, 0, chunk_bytes, want); /* none yet: it asks again */
    else if (k < 0)
        answer_error(c->fd, err[0] ? err : "refused");
    else
        answer_chunks(c, out, k, chunk_bytes, want);
    for (int i = 0; i < k; i++)
        close(out[i]);
    drop(c);
    return 1;
}

/* {"return": L, "positions": [...]}: 0, or -1 when it is not one. */
static int parse_return(json_t *req, gs_pool_request_t *r)
{
    json_int_t lease = 0;
    json_t *pos = NULL;
    if (json_unpack(req, "{s:I, s:o}", "return", &lease, "positions", &pos) != 0 || lease <= 0 ||
        !json_is_array(pos) || json_array_size(pos) == 0 ||
        json_array_size(pos) > GS_POOL_RETURN_MAX)
        return -1;
    r->lease = (uint64_t)lease;
    for (size_t i = 0; i < json_array_size(pos); i++) {
        json_t *v = json_array_get(pos, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > MAX_CHUNKS_SERVED)
            return -1;
        r->positions[r->nreturn++] = (int)json_integer_value(v);
    }
    return 0;
}

static void serve_one(struct conn *c, int64_t now_ms, gs_pool_serve_fn serve, void *arg)
{
    char buf[4096];
    int fds[1], nfds = 0;
    ssize_t n = gs_fd_recv(c->fd, buf, sizeof buf - 1, fds, 0, &nfds);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;                 /* spurious: wait for the request */
    if (n <= 0 || c->waiting) { /* closed, or a second request: the first is answered no more */
        drop(c);
        return;
    }
    buf[n] = '\0';
    json_error_t jerr;
    json_t *req = json_loads(buf, 0, &jerr);
    static gs_pool_request_t r;
    memset(&r, 0, sizeof r);
    r.pid = c->pid;
    r.uid = c->uid;
    r.now_us = now_ms * 1000;
    if (req && json_object_get(req, "return")) {
        char err[200] = "";
        uint64_t cb = 0;
        int want = 0;
        if (parse_return(req, &r) != 0)
            answer_error(c->fd, "bad request: expected {\"return\": N, \"positions\": [...]}");
        else if (serve(arg, &r, NULL, 0, &cb, &want, err, sizeof err) != 0)
            answer_error(c->fd, err[0] ? err : "refused");
        else
            gs_fd_send(c->fd, "{\"ok\":true}", 11, NULL, 0);
        json_decref(req);
        drop(c);
        return;
    }
    json_int_t lease = 0, from = 0, wait_ms = 0;
    if (!req ||
        json_unpack(req, "{s:I, s?I, s?I}", "lease", &lease, "from", &from, "wait_ms", &wait_ms) !=
            0 ||
        lease <= 0 || from < 0 || from > MAX_CHUNKS_SERVED || wait_ms < 0) {
        answer_error(c->fd, "bad request: expected {\"lease\": N}");
        json_decref(req);
        drop(c);
        return;
    }
    json_decref(req);
    c->lease = (uint64_t)lease;
    c->from = (int)from;
    c->until_ms = now_ms + (wait_ms < MAX_WAIT_MS ? wait_ms : MAX_WAIT_MS);
    serve_fetch(c, now_ms, serve, arg);
}

void gs_pool_socket_handle(gs_pool_socket_t *self, const zmq_pollitem_t *items, int n,
                           int64_t now_ms, gs_pool_serve_fn serve, void *arg)
{
    for (int i = 0; i < n; i++) {
        if (!(items[i].revents & (ZMQ_POLLIN | ZMQ_POLLERR)))
            continue;
        if (items[i].fd == self->listen_fd) {
            accept_all(self, now_ms);
            continue;
        }
        for (int k = 0; k < GS_POOL_SOCKET_MAX_CONN; k++)
            if (self->conn[k].fd == items[i].fd)
                serve_one(&self->conn[k], now_ms, serve, arg);
    }
    /* Growing leases may have grown meanwhile (a return just now, a chunk
     * zeroed), or the wait is over. */
    for (int k = 0; k < GS_POOL_SOCKET_MAX_CONN; k++)
        if (self->conn[k].fd >= 0 && self->conn[k].waiting)
            serve_fetch(&self->conn[k], now_ms, serve, arg);
    for (int k = 0; k < GS_POOL_SOCKET_MAX_CONN; k++)
        if (self->conn[k].fd >= 0 && !self->conn[k].waiting &&
            now_ms - self->conn[k].since_ms > GS_POOL_SOCKET_TIMEOUT_MS) {
            /* A hook sends its request as it connects: this one held a
             * slot for nothing (or was very late: it may ask again). */
            send_error(self->conn[k].fd, "no request within the pool socket's timeout", 1);
            drop(&self->conn[k]);
        }
}

int64_t gs_pool_socket_next_deadline(const gs_pool_socket_t *self)
{
    int64_t due = INT64_MAX;
    for (int k = 0; self && k < GS_POOL_SOCKET_MAX_CONN; k++) {
        const struct conn *c = &self->conn[k];
        if (c->fd < 0)
            continue;
        int64_t t = c->waiting ? c->until_ms : c->since_ms + GS_POOL_SOCKET_TIMEOUT_MS + 1;
        if (t < due)
            due = t;
    }
    return due;
}
