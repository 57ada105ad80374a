/*
 * conn_guard.c - see conn_guard.h.
 *
 * Descriptors are small, dense numbers, so the table of connections is an
 * array indexed by descriptor.  An event is read a moment after libzmq
 * emitted it, and a descriptor may have been closed and reused by then;
 * events come in order, so an ACCEPTED is always followed by the
 * DISCONNECTED of the same descriptor before its next ACCEPTED, and what is
 * counted at ACCEPTED (whoever holds the descriptor when it is read) is
 * what that DISCONNECTED takes off: the counts always balance.  Before a
 * socket is shut down, it is checked again to be one of ours (accepted on
 * our path) and its peer's uid the one being refused.
 */
#define _GNU_SOURCE
#include "conn_guard.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn_caps.h"
#include "log.h"

#define GRACE_US         1000000 /* a refused connection lives this long: its hello is answered */
#define WARN_INTERVAL_US 10000000
/* Refused connections of one uid waiting for their answer: more are cut at
 * once, so that a flood of refused connections (each living GRACE_US)
 * cannot fill the room kept for others. */
#define GRACE_MAX_PER_UID 8

typedef struct {
    int used;
    int over; /* refused: over its uid's limit */
    int cut;  /* shut down; waiting for libzmq's DISCONNECTED */
    uid_t uid;
    int64_t cut_at;
} conn_t;

typedef struct {
    uid_t uid;
    int trusted;           /* root or the broker's own account (conn_caps.h) */
    int count;             /* connections open */
    int over;              /* of which refused and not closed yet */
    int graced;            /* of which waiting for their grace to end */
    gs_conn_verdict_t why; /* of the last refusal */
    int64_t warned_us;
} uid_count_t;

static void free_item(void **item)
{
    free(*item);
    *item = NULL;
}

struct gs_conn_guard {
    zsock_t *router;
    zsock_t *monitor;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    conn_t *conns;
    size_t nconns;  /* size of conns */
    zhashx_t *uids; /* "uid" -> uid_count_t */
    int *pending;   /* descriptors refused, to be cut */
    size_t npending, pending_cap;
    int max_per_uid;     /* as set (max_connections_per_uid) */
    gs_conn_caps_t caps; /* what applies (conn_caps.h) */
    int total, users;    /* open: in all, of untrusted uids */
    uid_t self_uid;
    unsigned long long refused;
    int64_t warned_total_us;
};

gs_conn_guard_t *gs_conn_guard_new(zsock_t *router, const char *path, long fd_limit, char *err,
                                   size_t errlen)
{
    gs_conn_guard_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    self->router = router;
    snprintf(self->path, sizeof self->path, "%s", path ? path : "");
    self->uids = zhashx_new();
    zhashx_set_destructor(self->uids, free_item);
    self->max_per_uid = GS_CONN_DEFAULT_PER_UID;
    self->self_uid = geteuid();
    int max_total;
    if (fd_limit > 2 * GS_CONN_FD_RESERVE)
        max_total = (int)(fd_limit - GS_CONN_FD_RESERVE > INT_MAX ? INT_MAX
                                                                  : fd_limit - GS_CONN_FD_RESERVE);
    else {
        max_total = (int)(fd_limit / 2);
        gs_warn("the open-file limit (%ld) is low: a flood of connections could still exhaust it; "
                "raise it (LimitNOFILE= in the unit, ulimit -n) to %d or more",
                fd_limit, 4 * GS_CONN_FD_RESERVE);
    }
    self->caps = gs_conn_caps_make(max_total, self->max_per_uid);
    static unsigned n;
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://gs-conn-guard-%d-%u", (int)getpid(), ++n);
    /* A short queue: the I/O thread waits for us rather than accepting far
     * ahead of what has been counted. */
    if (zmq_socket_monitor(zsock_resolve(router), ep,
                           ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0 ||
        !(self->monitor = zsock_new(ZMQ_PAIR))) {
        snprintf(err, errlen, "cannot monitor the socket: %s", zmq_strerror(zmq_errno()));
        gs_conn_guard_destroy(&self);
        return NULL;
    }
    zsock_set_rcvhwm(self->monitor, 1);
    if (zsock_connect(self->monitor, "%s", ep) != 0) {
        snprintf(err, errlen, "cannot monitor the socket: %s", zmq_strerror(zmq_errno()));
        gs_conn_guard_destroy(&self);
        return NULL;
    }
    return self;
}

void gs_conn_guard_destroy(gs_conn_guard_t **self_p)
{
    gs_conn_guard_t *self = *self_p;
    if (!self)
        return;
    if (self->router && self->monitor) {
        /* libzmq's thread holds the monitor's lock while it waits for room
         * in a full queue, and stopping the monitor takes that lock: make
         * room first. */
        while (zsock_events(self->monitor) & ZMQ_POLLIN) {
            zmsg_t *ev = zmsg_recv(self->monitor);
            if (!ev)
                break;
            zmsg_destroy(&ev);
        }
        zmq_socket_monitor(zsock_resolve(self->router), NULL, 0);
    }
    zsock_destroy(&self->monitor);
    zhashx_destroy(&self->uids);
    free(self->conns);
    free(self->pending);
    free(self);
    *self_p = NULL;
}

void gs_conn_guard_set_per_uid(gs_conn_guard_t *self, int max)
{
    self->max_per_uid = max < 1 ? 1 : max;
    self->caps = gs_conn_caps_make(self->caps.total, self->max_per_uid);
    if (self->caps.per_uid < self->max_per_uid)
        gs_info("connections: %d per user (max_connections_per_uid is %d, but one user may "
                "hold at most a quarter of the %d this open-file limit leaves users; %d more "
                "are kept for root)",
                self->caps.per_uid, self->max_per_uid, self->caps.total - self->caps.reserved,
                self->caps.reserved);
}

void *gs_conn_guard_socket(gs_conn_guard_t *self)
{
    return zsock_resolve(self->monitor);
}

static uid_count_t *find_uid(const gs_conn_guard_t *self, uid_t uid)
{
    char key[16];
    snprintf(key, sizeof key, "%u", (unsigned)uid);
    return zhashx_lookup(self->uids, key);
}

static uid_count_t *uid_entry(gs_conn_guard_t *self, uid_t uid, int create)
{
    char key[16];
    snprintf(key, sizeof key, "%u", (unsigned)uid);
    uid_count_t *u = zhashx_lookup(self->uids, key);
    if (!u && create && (u = calloc(1, sizeof *u))) {
        u->uid = uid;
        if (zhashx_insert(self->uids, key, u) != 0) {
            free(u);
            u = NULL;
        }
    }
    return u;
}

/* fd is a connection accepted on our socket; its peer's uid in *uid. */
static int ours(const gs_conn_guard_t *self, int fd, uid_t *uid)
{
    struct sockaddr_un sa;
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0 || sa.sun_family != AF_UNIX ||
        len <= offsetof(struct sockaddr_un, sun_path) ||
        strncmp(sa.sun_path, self->path, sizeof sa.sun_path) != 0)
        return 0;
    struct ucred cred;
    socklen_t clen = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0)
        return 0;
    *uid = cred.uid;
    return 1;
}

static conn_t *slot(gs_conn_guard_t *self, int fd)
{
    if (fd < 0)
        return NULL;
    if ((size_t)fd >= self->nconns) {
        size_t n = self->nconns ? self->nconns : 256;
        while (n <= (size_t)fd)
            n *= 2;
        conn_t *more = realloc(self->conns, n * sizeof *more);
        if (!more)
            return NULL;
        memset(more + self->nconns, 0, (n - self->nconns) * sizeof *more);
        self->conns = more;
        self->nconns = n;
    }
    return &self->conns[fd];
}

static void forget(gs_conn_guard_t *self, int fd)
{
    conn_t *c = (fd >= 0 && (size_t)fd < self->nconns) ? &self->conns[fd] : NULL;
    if (!c || !c->used)
        return;
    uid_count_t *u = uid_entry(self, c->uid, 0);
    if (u) {
        u->count--;
        u->over -= c->over;
        u->graced -= c->over && !c->cut;
        if (!u->trusted)
            self->users--;
    }
    self->total--;
    memset(c, 0, sizeof *c);
}

static void shut(gs_conn_guard_t *self, int fd, conn_t *c)
{
    uid_t uid;
    if (c->over && !c->cut) {
        uid_count_t *u = uid_entry(self, c->uid, 0);
        if (u)
            u->graced--;
    }
    c->cut = 1;
    /* Still the connection we counted?  (libzmq may have closed it and the
     * descriptor been reused before its DISCONNECTED is read.) */
    if (ours(self, fd, &uid) && uid == c->uid)
        shutdown(fd, SHUT_RDWR); /* libzmq reads EOF, closes it and says DISCONNECTED */
}

static void pend(gs_conn_guard_t *self, int fd)
{
    if (self->npending == self->pending_cap) {
        size_t n = self->pending_cap ? 2 * self->pending_cap : 64;
        int *more = realloc(self->pending, n * sizeof *more);
        if (!more)
            return; /* cut at once instead, see on_accepted */
        self->pending = more;
        self->pending_cap = n;
    }
    self->pending[self->npending++] = fd;
}

static void warn_refused(gs_conn_guard_t *self, const uid_count_t *u, gs_conn_verdict_t why,
                         int64_t now, int64_t *warned)
{
    if (*warned && now - *warned < WARN_INTERVAL_US)
        return;
    *warned = now;
    if (why == GS_CONN_FULL)
        gs_error("%d connections open, the most this broker's open-file limit allows: "
                 "closing new ones at once (uid %u holds %d)",
                 self->total - 1, (unsigned)u->uid, u->count);
    else if (why == GS_CONN_OVER_USERS)
        gs_warn("%d connections of users open, all this open-file limit leaves them (%d more are "
                "kept for root): refusing uid %u's newest (it holds %d)",
                self->users - 1, self->caps.reserved, (unsigned)u->uid, u->count);
    else
        gs_warn("uid %u holds %d connections, more than max_connections_per_uid (%d): refusing "
                "and closing the newest",
                (unsigned)u->uid, u->count,
                u->trusted ? self->caps.per_trusted : self->caps.per_uid);
}

static void on_accepted(gs_conn_guard_t *self, int fd, int64_t now)
{
    forget(self, fd); /* a DISCONNECTED we never saw */
    uid_t uid;
    conn_t *c = slot(self, fd);
    if (!c || !ours(self, fd, &uid))
        return; /* closed already: its DISCONNECTED follows */
    uid_count_t *u = uid_entry(self, uid, 1);
    if (!u)
        return;
    u->trusted = gs_conn_caps_trusted(uid, self->self_uid);
    gs_conn_verdict_t why =
        gs_conn_caps_admit(&self->caps, u->trusted, u->count, self->users, self->total);
    c->used = 1;
    c->uid = uid;
    u->count++;
    self->users += !u->trusted;
    self->total++;
    if (why == GS_CONN_ADMIT)
        return;
    c->over = 1;
    u->over++;
    u->graced++;
    u->why = why;
    self->refused++;
    if (why == GS_CONN_FULL || u->graced > GRACE_MAX_PER_UID) {
        /* No room for grace: too near the descriptor limit (libzmq would
         * abort), or this uid has enough refusals waiting already. */
        warn_refused(self, u, why, now,
                     why == GS_CONN_FULL ? &self->warned_total_us : &u->warned_us);
        shut(self, fd, c);
        return;
    }
    c->cut_at = now + GRACE_US;
    size_t before = self->npending;
    pend(self, fd);
    if (self->npending == before)
        shut(self, fd, c);
    warn_refused(self, u, why, now, &u->warned_us);
}

int gs_conn_guard_on_monitor(gs_conn_guard_t *self, int64_t now)
{
    int ended = 0;
    while (zsock_events(self->monitor) & ZMQ_POLLIN) {
        zmsg_t *ev = zmsg_recv(self->monitor);
        if (!ev)
            break;
        zframe_t *f = zmsg_first(ev);
        if (f && zframe_size(f) >= 6) {
            uint16_t event;
            uint32_t value;
            memcpy(&event, zframe_data(f), 2);
            memcpy(&value, zframe_data(f) + 2, 4);
            if (event == ZMQ_EVENT_ACCEPTED)
                on_accepted(self, (int)value, now);
            else if (event == ZMQ_EVENT_DISCONNECTED) {
                forget(self, (int)value);
                ended++;
            }
        }
        zmsg_destroy(&ev);
    }
    return ended;
}

void gs_conn_guard_tick(gs_conn_guard_t *self, int64_t now)
{
    size_t keep = 0;
    for (size_t i = 0; i < self->npending; i++) {
        int fd = self->pending[i];
        conn_t *c = (size_t)fd < self->nconns ? &self->conns[fd] : NULL;
        if (!c || !c->used || !c->over || c->cut)
            continue; /* gone, or reused by a connection not refused */
        if (c->cut_at <= now)
            shut(self, fd, c);
        else
            self->pending[keep++] = fd;
    }
    self->npending = keep;
}

int64_t gs_conn_guard_next_deadline(const gs_conn_guard_t *self)
{
    int64_t t = INT64_MAX;
    for (size_t i = 0; i < self->npending; i++) {
        int fd = self->pending[i];
        const conn_t *c = (size_t)fd < self->nconns ? &self->conns[fd] : NULL;
        if (c && c->used && c->over && !c->cut && c->cut_at < t)
            t = c->cut_at;
    }
    return t;
}

int gs_conn_guard_refusing(const gs_conn_guard_t *self, uid_t uid, char *text, size_t len)
{
    const uid_count_t *u = find_uid(self, uid);
    if (!u || u->over <= 0)
        return 0;
    if (u->why == GS_CONN_OVER_USERS)
        snprintf(text, len,
                 "the broker holds %d connections of users, all it has room for (the rest is "
                 "kept for root): this one is refused and will be closed; try again later",
                 self->users);
    else
        snprintf(text, len,
                 "uid %u already holds %d connections to the broker, more than "
                 "max_connections_per_uid (%d)%s allows: this one is refused and will be closed",
                 (unsigned)uid, u->count, u->trusted ? self->caps.per_trusted : self->caps.per_uid,
                 !u->trusted && self->caps.per_uid < self->max_per_uid
                     ? " (lowered to a quarter of the room this broker's open-file limit leaves "
                       "users)"
                     : "");
    return 1;
}

json_t *gs_conn_guard_status(const gs_conn_guard_t *self)
{
    return json_pack("{s:i, s:i, s:i, s:i, s:i, s:I}", "open", self->total, "users_open",
                     self->users, "max_per_uid", self->caps.per_uid, "max_total", self->caps.total,
                     "reserved_for_root", self->caps.reserved, "refused",
                     (json_int_t)self->refused);
}
