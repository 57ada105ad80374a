/*
 * session_dispatch.c - register/unregister/cell from launchers, join,
 * acquire, release and memory from hooks, turned into scheduler events
 * (scheduler.h); the scheduler's grants and revokes turned into messages.
 *
 * Every handler ends with gs_broker_sched_flush, so a decision reaches the
 * hooks in the same turn of the loop as the message that caused it (the
 * hand-off after a release is one loop turn).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "admin.h"
#include "broker_internal.h"
#include "log.h"
#include "peer.h"
#include "wire.h"

int gs_broker_gpu_index(const gs_broker_t *self, const char *uuid)
{
    for (int i = 0; i < self->inventory.count; i++)
        if (strcmp(self->inventory.gpus[i].uuid, uuid) == 0)
            return i;
    return -1;
}

int64_t gs_broker_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void reply_ok(gs_broker_t *self, zframe_t *peer, const json_t *req, const char *session)
{
    json_t *ok = gs_msg_new(GS_MSG_OK);
    if (session)
        json_object_set_new(ok, "session", json_string(session));
    gs_broker_echo_seq(ok, req);
    gs_broker_reply(self, peer, ok);
}

/* ---- scheduler actions -> messages ---------------------------------------- */

static void send_actions(gs_broker_t *self);

/* Parking looks at every change too (park.h): it may park or unpark
 * sessions, which the scheduler turns into more actions. */
void gs_broker_sched_flush(gs_broker_t *self)
{
    for (int round = 0; round < 8; round++) {
        send_actions(self);
        if (!gs_park_poll(self))
            break;
    }
    send_actions(self);
}

static void send_actions(gs_broker_t *self)
{
    enum { MAX_DEAD = 16 };
    char dead[MAX_DEAD][64];
    int ndead = 0;
    gs_sched_action_t a;
    while (gs_sched_pop_action(self->sched, &a)) {
        gs_client_t *c = gs_sessions_client_by_key(self->sessions, a.client);
        if (!c || a.gpu < 0 || a.gpu >= self->inventory.count)
            continue;
        json_t *m;
        if (a.kind == GS_ACT_GRANT) {
            m = gs_msg_new(GS_MSG_GRANT);
            json_object_set_new(m, "quantum_us", json_integer((json_int_t)a.quantum_us));
            if (c->acquire_seq[a.gpu] >= 0)
                json_object_set_new(m, "seq", json_integer(c->acquire_seq[a.gpu]));
        } else {
            m = gs_msg_new(GS_MSG_REVOKE);
            json_object_set_new(m, "reason", json_string(a.reason));
        }
        json_object_set_new(m, "device", json_string(self->inventory.gpus[a.gpu].uuid));
        json_object_set_new(m, "grant_id", json_integer((json_int_t)a.grant_id));
        if (self->eventlog) /* the fields cost allocations: none without a log */
            gs_eventlog_write(self->eventlog, a.kind == GS_ACT_GRANT ? "grant" : "revoke",
                              json_pack("{s:s, s:i, s:s, s:I, s:I, s:s?}", "session", c->session,
                                        "pid", (int)c->pid, "gpu", self->inventory.gpus[a.gpu].uuid,
                                        "grant_id", (json_int_t)a.grant_id, "quantum_us",
                                        (json_int_t)a.quantum_us, "reason",
                                        a.kind == GS_ACT_GRANT ? NULL : a.reason));
        gs_debug("%s %llu to pid %ld (session %s, GPU %d)%s%s",
                 a.kind == GS_ACT_GRANT ? "grant" : "revoke", (unsigned long long)a.grant_id,
                 c->pid, c->session, a.gpu, a.reason ? ": " : "", a.reason ? a.reason : "");
        gs_perr_t err;
        if (gs_wire_send(self->router, c->identity, m, &err) != 0) {
            if (err.code != GS_PERR_NONE)
                gs_error("internal: a grant or revoke breaks the protocol: %s", err.text);
            else if (errno == EHOSTUNREACH && ndead < MAX_DEAD)
                snprintf(dead[ndead++], sizeof dead[0], "%s", c->key); /* peer vanished */
            else
                gs_warn("could not send to pid %ld: %s", c->pid, zmq_strerror(errno));
        }
        json_decref(m);
    }
    for (int i = 0; i < ndead; i++)
        gs_broker_client_gone(self, dead[i], "its connection is gone");
}

/* The broker's record of a session that the scheduler has forgotten. */
static void forget_if_gone(gs_broker_t *self, const char *id)
{
    gs_session_t *s = gs_sessions_session(self->sessions, id, 0);
    if (s && !s->registered && !gs_sched_has_session(self->sched, id))
        gs_sessions_session_remove(self->sessions, id);
}

void gs_broker_client_gone(gs_broker_t *self, const char *key, const char *why)
{
    gs_client_t *c = gs_sessions_client_by_key(self->sessions, key);
    if (!c)
        return;
    char session[sizeof c->session];
    snprintf(session, sizeof session, "%s", c->session);
    if (session[0]) {
        int grants = gs_sched_client_grants(self->sched, key);
        gs_info("pid %ld of session %s is gone (%s)%s", c->pid, session, why,
                grants > 0 ? ": its grant is released" : "");
        gs_sched_client_gone(self->sched, key, gs_broker_now_us());
        gs_eventlog_write(
            self->eventlog, "client_gone",
            json_pack("{s:s, s:i, s:s}", "session", session, "pid", (int)c->pid, "why", why));
    }
    gs_park_on_client_gone(self, key);
    gs_sessions_client_remove(self->sessions, c);
    if (session[0])
        forget_if_gone(self, session);
    gs_broker_sched_flush(self);
}

/* The sender (by its socket credentials) owns s or is an admin. */
static int may_touch(const gs_broker_t *self, const gs_session_t *s)
{
    return !self->peer.valid || gs_admin_may_touch(self->peer.uid, s->owner_uid, self->admin_gid);
}

/* ---- launcher messages ----------------------------------------------------- */

static void on_register(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    const char *kernel_id = gs_msg_str(msg, "kernel_id", "");
    gs_session_t *s = gs_sessions_session(self->sessions, kernel_id, 0);
    if (s && s->owner_known && !may_touch(self, s)) {
        gs_broker_reply_error(self, peer, msg, "permission_denied",
                              "this kernel id belongs to another user's session");
        return;
    }
    if (!s)
        s = gs_sessions_session(self->sessions, kernel_id, 1);
    if (!s) {
        gs_broker_reply_error(self, peer, msg, "internal", "out of memory");
        return;
    }
    s->registered = 1;
    s->registrar_pid = self->peer.valid ? self->peer.pid : 0;
    if (self->peer.valid && !s->owner_known) {
        s->owner_uid = self->peer.uid;
        s->owner_known = 1;
    }
    snprintf(s->kernel_id, sizeof s->kernel_id, "%s", kernel_id);
    snprintf(s->user, sizeof s->user, "%s", gs_msg_str(msg, "user", ""));
    snprintf(s->notebook, sizeof s->notebook, "%s", gs_msg_str(msg, "notebook", ""));
    s->kernel_pid = (long)gs_msg_int(msg, "pid", 0);
    gs_sched_register(self->sched, s->id, gs_broker_now_us());
    gs_info("session %s registered: user %s, notebook \"%s\", kernel pid %ld", s->id, s->user,
            s->notebook, s->kernel_pid);
    gs_eventlog_write(self->eventlog, "register",
                      json_pack("{s:s, s:s, s:s, s:i}", "session", s->id, "user", s->user,
                                "notebook", s->notebook, "pid", (int)s->kernel_pid));
    json_t *r = gs_msg_new(GS_MSG_REGISTERED);
    json_object_set_new(r, "session", json_string(s->id));
    gs_broker_echo_seq(r, msg);
    gs_broker_reply(self, peer, r);
    gs_broker_sched_flush(self);
}

static gs_session_t *known_session(gs_broker_t *self, zframe_t *peer, const json_t *msg,
                                   int registered)
{
    const char *id = gs_msg_str(msg, "session", "");
    gs_session_t *s = gs_sessions_session(self->sessions, id, 0);
    if (!s || (registered && !s->registered)) {
        char text[200];
        snprintf(text, sizeof text, "no %ssession \"%.128s\"", registered ? "registered " : "", id);
        gs_broker_reply_error(self, peer, msg, "unknown_session", text);
        return NULL;
    }
    if (s->owner_known && !may_touch(self, s)) {
        gs_broker_reply_error(self, peer, msg, "permission_denied",
                              "the session belongs to another user");
        return NULL;
    }
    return s;
}

static void on_unregister(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    gs_session_t *s = known_session(self, peer, msg, 1);
    if (!s)
        return;
    /* A kernel restarted by the server registers again from a new watcher
     * process; the old watcher's late unregister must not drop the new
     * session.  (The provisioner registers and unregisters from the server's
     * process, over separate connections: same pid.) */
    if (s->registrar_pid && self->peer.valid && self->peer.pid != s->registrar_pid &&
        kill(s->registrar_pid, 0) == 0) {
        json_t *ok = gs_msg_new(GS_MSG_OK);
        json_object_set_new(ok, "info",
                            json_string("ignored: the session was registered again since"));
        gs_broker_echo_seq(ok, msg);
        gs_broker_reply(self, peer, ok);
        return;
    }
    gs_info("session %s unregistered", s->id);
    gs_eventlog_write(self->eventlog, "unregister", json_pack("{s:s}", "session", s->id));
    char id[sizeof s->id];
    snprintf(id, sizeof id, "%s", s->id);
    s->registered = 0;
    s->cell_busy = 0;
    gs_sched_unregister(self->sched, id, gs_broker_now_us());
    forget_if_gone(self, id);
    reply_ok(self, peer, msg, NULL);
    gs_broker_sched_flush(self);
}

static void on_cell(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    gs_session_t *s = known_session(self, peer, msg, 0);
    if (!s)
        return;
    s->cell_busy = strcmp(gs_msg_str(msg, "state", "idle"), "busy") == 0;
    snprintf(s->cell_msg_id, sizeof s->cell_msg_id, "%s", gs_msg_str(msg, "msg_id", ""));
    gs_debug("session %s cell %s", s->id, s->cell_busy ? "busy" : "idle");
    gs_eventlog_write(self->eventlog, "cell",
                      json_pack("{s:s, s:s, s:s}", "session", s->id, "state",
                                s->cell_busy ? "busy" : "idle", "msg_id", s->cell_msg_id));
    gs_sched_cell(self->sched, s->id, s->cell_busy, gs_broker_now_us());
    gs_broker_sched_flush(self);
}

/* ---- hook messages ------------------------------------------------------------ */

static void on_join(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    gs_client_t *c = gs_sessions_client(self->sessions, peer);
    if (!c) {
        gs_broker_reply_error(self, peer, msg, "internal", "out of memory");
        return;
    }
    c->pid = (long)gs_msg_int(msg, "pid", 0);
    if (self->peer.valid)
        c->peer_pid = (long)self->peer.pid;
    c->last_seen_us = gs_broker_now_us();
    const char *session = gs_msg_str(msg, "session", NULL);
    char made[32];
    if (!session) {
        snprintf(made, sizeof made, "p%ld", c->pid);
        session = made;
    }
    gs_session_t *s = gs_sessions_session(self->sessions, session, 0);
    if (s && s->owner_known && !may_touch(self, s)) {
        gs_broker_reply_error(self, peer, msg, "permission_denied",
                              "the session belongs to another user");
        return;
    }
    if (!s && (s = gs_sessions_session(self->sessions, session, 1)) && self->peer.valid) {
        s->owner_uid = self->peer.uid;
        s->owner_known = 1;
    }
    if (!s) {
        gs_broker_reply_error(self, peer, msg, "internal", "out of memory");
        return;
    }
    char old[sizeof c->session];
    snprintf(old, sizeof old, "%s", c->session);
    snprintf(c->session, sizeof c->session, "%s", s->id);
    snprintf(c->role, sizeof c->role, "hook");
    gs_sched_join(self->sched, c->key, s->id, gs_broker_now_us());
    gs_park_on_join(self, c->key, s->id, c->peer_pid, self->peer.valid ? (long)self->peer.uid : -1,
                    strcmp(gs_msg_str(msg, "memory_mode", "device"), "managed") == 0,
                    json_is_true(json_object_get(msg, "swap")));
    if (old[0] && strcmp(old, s->id) != 0)
        forget_if_gone(self, old);
    gs_debug("pid %ld joined session %s", c->pid, s->id);
    reply_ok(self, peer, msg, s->id);
    gs_broker_sched_flush(self);
}

/* The client and the GPU index of the message's device, or NULL after an
 * error reply. */
static gs_client_t *client_gpu(gs_broker_t *self, zframe_t *peer, const json_t *msg, int *index)
{
    gs_client_t *c = gs_sessions_client_lookup(self->sessions, peer);
    if (!c || !c->session[0]) {
        gs_broker_reply_error(self, peer, msg, "not_joined", "send join before using a GPU");
        return NULL;
    }
    const char *uuid = gs_msg_str(msg, "device", "");
    int i = gs_broker_gpu_index(self, uuid);
    if (i < 0) {
        char text[160];
        snprintf(text, sizeof text, "no GPU with UUID \"%.64s\" on this machine", uuid);
        gs_broker_reply_error(self, peer, msg, "unknown_device", text);
        return NULL;
    }
    *index = i;
    return c;
}

/* "held by alice's notebook train.ipynb for at most 12.5 s": what a cell
 * that waits for the GPU shows (the hook prints it after a second). */
static void wait_text(gs_broker_t *self, const gs_sched_wait_t *w, char *out, size_t len)
{
    if (w->nholders == 0) {
        snprintf(out, len, "queued: the GPU is being handed over or made room on");
        return;
    }
    gs_session_t *h = gs_sessions_session(self->sessions, w->holder, 0);
    const char *nb = h && h->notebook[0] ? h->notebook : w->holder;
    const char *slash = strrchr(nb, '/');
    nb = slash && slash[1] ? slash + 1 : nb;
    char who[400], more[32] = "";
    if (h && h->user[0])
        snprintf(who, sizeof who, "%.64s's notebook %.256s", h->user, nb);
    else
        snprintf(who, sizeof who, "notebook %.256s", nb);
    if (w->nholders > 1)
        snprintf(more, sizeof more, " and %d more", w->nholders - 1);
    if (w->left_us == GS_SCHED_NEVER)
        snprintf(out, len, "held by %s%s until its cell ends", who, more);
    else
        snprintf(out, len, "held by %s%s for at most %.1f s", who, more, w->left_us / 1e6);
}

static void on_acquire(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    gs_client_t *c = client_gpu(self, peer, msg, &i);
    if (!c)
        return;
    json_t *seq = json_object_get(msg, "seq");
    c->acquire_seq[i] = json_is_integer(seq) ? (long long)json_integer_value(seq) : -1;
    int64_t now = gs_broker_now_us();
    gs_sched_acquire(self->sched, c->key, i, gs_msg_int(msg, "burst_p90_us", -1),
                     gs_msg_int(msg, "burst_last_us", -1), now);
    gs_broker_sched_flush(self);
    /* Not granted at once: say who holds the GPU and for how long at most,
     * for the line the waiting cell shows. */
    gs_sched_wait_t w;
    if (gs_sched_wait_info(self->sched, c->key, i, now, &w)) {
        char text[600];
        wait_text(self, &w, text, sizeof text);
        json_t *r = gs_msg_new(GS_MSG_OK);
        json_object_set_new(r, "info", json_string(text));
        gs_broker_echo_seq(r, msg);
        gs_broker_reply(self, peer, r);
    }
}

static void on_release(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    gs_client_t *c = client_gpu(self, peer, msg, &i);
    if (!c)
        return;
    gs_sched_release(self->sched, c->key, i, (uint64_t)gs_msg_int(msg, "grant_id", 0),
                     gs_broker_now_us());
    if (self->eventlog)
        gs_eventlog_write(self->eventlog, "release",
                          json_pack("{s:s, s:i, s:s, s:I, s:s, s:I, s:I}", "session", c->session,
                                    "pid", (int)c->pid, "gpu", self->inventory.gpus[i].uuid,
                                    "grant_id", (json_int_t)gs_msg_int(msg, "grant_id", 0),
                                    "reason", gs_msg_str(msg, "reason", ""), "used_us",
                                    (json_int_t)gs_msg_int(msg, "used_us", 0), "overuse_us",
                                    (json_int_t)gs_msg_int(msg, "overuse_us", 0)));
    if (strcmp(gs_msg_str(msg, "reason", ""), "exit") == 0 &&
        gs_sched_client_grants(self->sched, c->key) == 0) {
        char key[sizeof c->key];
        snprintf(key, sizeof key, "%s", c->key);
        gs_broker_client_gone(self, key, "exited");
        return;
    }
    gs_broker_sched_flush(self);
}

static void on_memory(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    gs_client_t *c = client_gpu(self, peer, msg, &i);
    if (!c)
        return;
    uint64_t used = (uint64_t)gs_msg_int(msg, "used_bytes", 0);
    gs_sched_memory(self->sched, c->key, i, used, gs_broker_now_us());
    gs_park_on_memory(self, c->key, i, used, (uint64_t)gs_msg_int(msg, "movable_bytes", 0));
    gs_broker_sched_flush(self);
}

static void on_swapped(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    gs_client_t *c = client_gpu(self, peer, msg, &i);
    if (!c)
        return;
    gs_park_on_swapped(self, c->key, i, msg);
    gs_broker_sched_flush(self);
}

/* Answered by parking (park_poll.c), now or once victims are parked. */
static void on_make_room(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    gs_client_t *c = client_gpu(self, peer, msg, &i);
    if (!c)
        return;
    json_t *seq = json_object_get(msg, "seq");
    gs_park_make_room(self, peer, c->key, i, (uint64_t)gs_msg_int(msg, "bytes", 1),
                      json_is_integer(seq) ? (long long)json_integer_value(seq) : -1);
}

int gs_broker_dispatch_session(gs_broker_t *self, zframe_t *peer, gs_msg_type_t type,
                               const json_t *msg)
{
    gs_client_t *known = gs_sessions_client_lookup(self->sessions, peer);
    if (known)
        known->last_seen_us = gs_broker_now_us(); /* any message is a sign of life */
    switch (type) {
    case GS_MSG_REGISTER:
        on_register(self, peer, msg);
        return 1;
    case GS_MSG_UNREGISTER:
        on_unregister(self, peer, msg);
        return 1;
    case GS_MSG_CELL:
        on_cell(self, peer, msg);
        return 1;
    case GS_MSG_JOIN:
        on_join(self, peer, msg);
        return 1;
    case GS_MSG_ACQUIRE:
        on_acquire(self, peer, msg);
        return 1;
    case GS_MSG_RELEASE:
        on_release(self, peer, msg);
        return 1;
    case GS_MSG_MEMORY:
        on_memory(self, peer, msg);
        return 1;
    case GS_MSG_MAKE_ROOM:
        on_make_room(self, peer, msg);
        return 1;
    case GS_MSG_SWAPPED:
        on_swapped(self, peer, msg);
        return 1;
    default:
        return 0;
    }
}
