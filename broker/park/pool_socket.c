/*
 * pool_socket.c - the listener and its short-lived connections
 * (pool_socket.h).
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

#include "fd_pass.h"

#define MAX_CHUNKS_SERVED 4096

struct conn {
    int fd; /* -1: free slot */
    int64_t since_ms;
    pid_t pid;
    uid_t uid;
};

struct gs_pool_socket {
    int listen_fd;
    char path[108];
    struct conn conn[GS_POOL_SOCKET_MAX_CONN];
};

gs_pool_socket_t *gs_pool_socket_new(const char *path, mode_t mode, char *err, size_t errlen)
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
    snprintf(self->path, sizeof self->path, "%s", path);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    self->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (self->listen_fd < 0)
        goto fail;
    unlink(path); /* ours: the broker's directory was checked before (socket_dir.c) */
    /* Created with the final mode: no moment in which others could connect. */
    mode_t old = umask(0777 & ~mode);
    int rc = bind(self->listen_fd, (struct sockaddr *)&sa, sizeof sa);
    umask(old);
    if (rc < 0 || chmod(path, mode) < 0 || listen(self->listen_fd, 64) < 0)
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

static void accept_all(gs_pool_socket_t *self, int64_t now_ms)
{
    for (;;) {
        int fd = accept4(self->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN, or out of descriptors: the rest wait in the backlog */
        struct ucred cred;
        socklen_t len = sizeof cred;
        struct conn *slot = NULL;
        for (int i = 0; i < GS_POOL_SOCKET_MAX_CONN && !slot; i++)
            if (self->conn[i].fd < 0)
                slot = &self->conn[i];
        if (!slot || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
            static const char busy[] = "{\"error\":\"the host pool is busy; try again\"}";
            gs_fd_send(fd, busy, sizeof busy - 1, NULL, 0);
            close(fd);
            continue;
        }
        *slot = (struct conn){fd, now_ms, cred.pid, cred.uid};
    }
}

static void answer_error(int fd, const char *msg)
{
    json_t *o = json_pack("{s:s}", "error", msg);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (s)
        gs_fd_send(fd, s, strlen(s), NULL, 0);
    free(s);
    json_decref(o);
}

static void serve_one(struct conn *c, gs_pool_serve_fn serve, void *arg)
{
    char buf[256];
    int fds[1], nfds = 0;
    ssize_t n = gs_fd_recv(c->fd, buf, sizeof buf - 1, fds, 0, &nfds);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return; /* spurious: wait for the request */
    if (n <= 0) {
        drop(c);
        return;
    }
    buf[n] = '\0';
    json_error_t jerr;
    json_t *req = json_loads(buf, 0, &jerr);
    json_int_t lease = 0;
    if (!req || json_unpack(req, "{s:I}", "lease", &lease) != 0 || lease <= 0) {
        answer_error(c->fd, "bad request: expected {\"lease\": N}");
        json_decref(req);
        drop(c);
        return;
    }
    json_decref(req);
    gs_pool_request_t r = {c->pid, c->uid, (uint64_t)lease};
    static int out[MAX_CHUNKS_SERVED];
    uint64_t chunk_bytes = 0;
    char err[200] = "";
    int k = serve(arg, &r, out, MAX_CHUNKS_SERVED, &chunk_bytes, err, sizeof err);
    if (k < 0) {
        answer_error(c->fd, err[0] ? err : "refused");
        drop(c);
        return;
    }
    /* The answer is a few datagrams of a few hundred bytes: the socket's
     * buffer takes them without blocking. */
    for (int first = 0; first < k || (k == 0 && first == 0); first += GS_FD_PASS_MAX) {
        int count = k - first < GS_FD_PASS_MAX ? k - first : GS_FD_PASS_MAX;
        char head[200];
        int len = snprintf(head, sizeof head,
                           "{\"lease\":%lld,\"chunk_bytes\":%llu,\"chunks\":%d,\"first\":%d,"
                           "\"count\":%d}",
                           (long long)lease, (unsigned long long)chunk_bytes, k, first, count);
        if (gs_fd_send(c->fd, head, (size_t)len, out + first, count) < 0)
            break;
        if (k == 0)
            break;
    }
    for (int i = 0; i < k; i++)
        close(out[i]);
    drop(c);
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
                serve_one(&self->conn[k], serve, arg);
    }
    for (int k = 0; k < GS_POOL_SOCKET_MAX_CONN; k++)
        if (self->conn[k].fd >= 0 && now_ms - self->conn[k].since_ms > GS_POOL_SOCKET_TIMEOUT_MS)
            drop(&self->conn[k]);
}
