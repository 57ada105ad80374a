/*
 * session_dispatch.c - register/unregister/cell from launchers, join,
 * acquire, release and memory from hooks, turned into scheduler events
 * (scheduler.h); make_room, memory reports and the swap tier's `swapped`
 * handed to parking (park.h).
 *
 * Every handler ends with gs_settle (settle.h), which sends what the
 * scheduler and parking decided.
 */
#include "session_dispatch.h"

#include <signal.h>
#include <string.h>

#include "admin.h"
#include "clock.h"
#include "log.h"
#include "proc_alive.h"
#include "reply.h"
#include "session_place.h"
#include "settle.h"

static void reply_ok(gs_broker_t *self, zframe_t *peer, const json_t *req)
{
    json_t *ok = gs_msg_new(GS_MSG_OK);
    gs_reply_echo_seq(ok, req);
    gs_reply_send(self->router, peer, ok);
}

/* The sender (by its socket credentials) owns s or is an admin; a sender
 * without credentials touches nothing. */
static int may_touch(const gs_broker_t *self, const gs_session_t *s)
{
    return gs_admin_sender_may_touch(self->peer.valid, self->peer.uid, s->owner_known, s->owner_uid,
                                     self->admin_gid);
}

/* Sessions are made only for senders with credentials: their owner. */
static int refuse_without_credentials(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    if (self->peer.valid)
        return 0;
    gs_reply_error(self->router, peer, msg, "permission_denied",
                   "no peer credentials: the broker serves only local (ipc) connections");
    return 1;
}

/* The sender owns s from now on: its uid, and its account's name for
 * display (never the name a message claims). */
static void take_ownership(gs_broker_t *self, gs_session_t *s)
{
    s->owner_uid = self->peer.uid;
    s->owner_known = 1;
    gs_admin_account_name(s->owner_uid, s->user, sizeof s->user);
}

/* The sender's session of that name, made (and owned by the sender) when
 * it has none; NULL without memory.  A session made now takes the
 * placement a hello of the same name made for it (session_place.h). */
static gs_session_t *own_session(gs_broker_t *self, const char *name)
{
    gs_session_t *s = gs_sessions_named(self->sessions, self->peer.uid, name);
    if (s)
        return s;
    s = gs_sessions_create_named(self->sessions, self->peer.uid, name);
    if (!s)
        return NULL;
    take_ownership(self, s);
    gs_session_place_made(self, s->id);
    return s;
}

/* ---- launcher messages ----------------------------------------------------- */

static void on_register(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    if (refuse_without_credentials(self, peer, msg))
        return;
    /* The kernel id names a session of the sender's own (sessions.h):
     * another user's session of that name is another session, so nobody
     * can register, or register first, a kernel id of someone else's. */
    const char *kernel_id = gs_msg_str(msg, "kernel_id", "");
    gs_session_t *s = own_session(self, kernel_id);
    if (!s) {
        gs_reply_error(self->router, peer, msg, "internal", "out of memory");
        return;
    }
    s->registered = 1;
    s->registrar_pid = self->peer.pid;
    s->registrar_gone = 0;
    snprintf(s->kernel_id, sizeof s->kernel_id, "%s", kernel_id);
    /* The user a launcher names is only a claim (JupyterHub's user name may
     * differ from the account): kept, and shown as claimed, when it is not
     * the owner's account. */
    const char *claimed = gs_msg_str(msg, "user", "");
    gs_sessions_copy_text(s->claimed, sizeof s->claimed, strcmp(claimed, s->user) ? claimed : "");
    /* Registrars that do not know the notebook (the launcher's watcher on
     * notebook 6) keep the path another one (the provisioner) told. */
    const char *notebook = gs_msg_str(msg, "notebook", "");
    if (*notebook)
        gs_sessions_copy_text(s->notebook, sizeof s->notebook, notebook);
    s->kernel_pid = (long)gs_msg_int(msg, "pid", 0);
    /* Start times, so that liveness (liveness.h) tells a reused pid from
     * the process it knew.  The kernel's pid is taken on the registrar's
     * word only when the registrar is a local process (credentials). */
    s->registrar_start = gs_proc_start(s->registrar_pid);
    s->kernel_start = s->registrar_pid ? gs_proc_start(s->kernel_pid) : 0;
    gs_sched_register(self->sched, s->id, gs_clock_now_us());
    gs_info("session %s registered: user %s%s%s%s, notebook \"%s\", kernel pid %ld", s->id, s->user,
            s->claimed[0] ? " (registered as \"" : "", s->claimed, s->claimed[0] ? "\")" : "",
            s->notebook, s->kernel_pid);
    json_t *ev = json_pack("{s:s, s:s, s:i, s:s, s:i}", "session", s->id, "user", s->user, "uid",
                           (int)s->owner_uid, "notebook", s->notebook, "pid", (int)s->kernel_pid);
    if (ev && s->claimed[0])
        json_object_set_new(ev, "claimed_user", json_string(s->claimed));
    gs_eventlog_write(self->eventlog, "register", ev);
    json_t *r = gs_msg_new(GS_MSG_REGISTERED);
    /* The name, which the launcher sends back in cell and unregister. */
    json_object_set_new(r, "session", json_string(s->name));
    gs_reply_echo_seq(r, msg);
    gs_reply_send(self->router, peer, r);
    gs_settle(self);
}

/* The session a message names, or NULL after an error reply: the sender's
 * own of that name; else, for an admin, the session whose id (as the
 * status shows it: NAME@UID for another user's) is the name given. */
static gs_session_t *known_session(gs_broker_t *self, zframe_t *peer, const json_t *msg,
                                   int registered)
{
    const char *id = gs_msg_str(msg, "session", "");
    gs_session_t *s =
        self->peer.valid ? gs_sessions_named(self->sessions, self->peer.uid, id) : NULL;
    if (!s && (s = gs_sessions_session(self->sessions, id, 0)) && !may_touch(self, s)) {
        gs_reply_error(self->router, peer, msg, "permission_denied",
                       "the session belongs to another user");
        return NULL;
    }
    if (!s || (registered && !s->registered)) {
        char text[200];
        snprintf(text, sizeof text, "no %ssession \"%.128s\"", registered ? "registered " : "", id);
        gs_reply_error(self->router, peer, msg, "unknown_session", text);
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
        gs_reply_echo_seq(ok, msg);
        gs_reply_send(self->router, peer, ok);
        return;
    }
    gs_info("session %s unregistered", s->id);
    gs_eventlog_write(self->eventlog, "unregister", json_pack("{s:s}", "session", s->id));
    char id[sizeof s->id];
    snprintf(id, sizeof id, "%s", s->id);
    reply_ok(self, peer, msg);
    gs_settle_end_session(self, id);
}

/* %gpushare release: park the session's memory once it is idle. */
static void on_park(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    gs_session_t *s = known_session(self, peer, msg, 0);
    if (!s)
        return;
    char info[700];
    if (gs_park_request(self->park, s->id, gs_clock_now_us(), info, sizeof info) != 0) {
        char text[900];
        snprintf(text, sizeof text, "session %.128s cannot be parked: %.700s", s->id, info);
        gs_reply_error(self->router, peer, msg, "not_parkable", text);
        return;
    }
    json_t *ok = gs_msg_new(GS_MSG_OK);
    json_object_set_new(ok, "info", json_string(info));
    gs_reply_echo_seq(ok, msg);
    gs_reply_send(self->router, peer, ok);
    gs_settle(self);
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
    gs_sched_cell(self->sched, s->id, s->cell_busy, gs_clock_now_us());
    gs_settle(self);
}

/* ---- hook messages ------------------------------------------------------------ */

static void on_join(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    if (refuse_without_credentials(self, peer, msg))
        return;
    /* A hook joins again when it found that this broker had dropped it, or
     * may have (its process was stopped for longer than the silence
     * limit): it has forgotten its grants and will release none of them,
     * so whatever the broker still holds for it goes now, and it starts
     * over under a new epoch (protocol.md, "Fencing"). */
    gs_client_t *c = gs_sessions_client_lookup(self->sessions, peer);
    if (c && c->epoch) {
        char key[sizeof c->key];
        snprintf(key, sizeof key, "%s", c->key);
        gs_settle_client_gone(self, key, GS_GONE_DROPPED, "it joined again");
    }
    c = gs_sessions_client(self->sessions, peer);
    if (!c) {
        gs_reply_error(self->router, peer, msg, "internal", "out of memory");
        return;
    }
    c->pid = (long)gs_msg_int(msg, "pid", 0);
    c->peer_pid = (long)self->peer.pid;
    c->peer_uid = self->peer.uid;
    c->last_seen_us = gs_clock_now_us();
    const char *session = gs_msg_str(msg, "session", NULL);
    char made[32];
    if (!session) {
        snprintf(made, sizeof made, "p%ld", c->pid);
        session = made;
    }
    /* The sender's own session of that name (sessions.h): another user's
     * of the same name is another session, so a join is never refused for
     * a name someone else took first. */
    gs_session_t *s = own_session(self, session);
    if (!s) {
        gs_reply_error(self->router, peer, msg, "internal", "out of memory");
        return;
    }
    char old[sizeof c->session];
    snprintf(old, sizeof old, "%s", c->session);
    snprintf(c->session, sizeof c->session, "%s", s->id);
    snprintf(c->role, sizeof c->role, "hook");
    int64_t now = gs_clock_now_us();
    gs_sched_join(self->sched, c->key, s->id, now);
    gs_session_place_join(self, s->id, msg);
    gs_park_on_join(self->park, c->key, s->id, c->peer_pid, (long)self->peer.uid,
                    strcmp(gs_msg_str(msg, "memory_mode", "device"), "managed") == 0,
                    json_is_true(json_object_get(msg, "swap")),
                    (uint64_t)gs_msg_int(msg, "swap_segment_bytes", 0), now);
    if (old[0] && strcmp(old, s->id) != 0)
        gs_settle_forget_session(self, old);
    c->epoch = ++self->next_epoch;
    gs_debug("pid %ld joined session %s (epoch %lld)", c->pid, s->id, c->epoch);
    gs_eventlog_write(self->eventlog, "join",
                      json_pack("{s:s, s:i, s:I}", "session", s->id, "pid", (int)c->pid, "epoch",
                                (json_int_t)c->epoch));
    json_t *ok = gs_msg_new(GS_MSG_OK);
    json_object_set_new(ok, "session", json_string(s->name));
    json_object_set_new(ok, "epoch", json_integer(c->epoch));
    gs_reply_echo_seq(ok, msg);
    gs_reply_send(self->router, peer, ok);
    gs_settle(self);
}

/* The client and the GPU index of the message's device, or NULL after an
 * error reply. */
static gs_client_t *client_gpu(gs_broker_t *self, zframe_t *peer, const json_t *msg, int *index)
{
    gs_client_t *c = gs_sessions_client_lookup(self->sessions, peer);
    if (!c || !c->session[0]) {
        gs_reply_error(self->router, peer, msg, "not_joined", "send join before using a GPU");
        return NULL;
    }
    const char *uuid = gs_msg_str(msg, "device", "");
    int i = gs_gpu_inventory_find(&self->inventory, uuid);
    if (i < 0) {
        char text[160];
        snprintf(text, sizeof text, "no GPU with UUID \"%.64s\" on this machine", uuid);
        gs_reply_error(self->router, peer, msg, "unknown_device", text);
        return NULL;
    }
    *index = i;
    return c;
}

/* "held by alice's notebook train.ipynb for at most 12.5 s" (or "alice's
 * program train" for a session no launcher registered): what a cell that
 * waits for the GPU shows, in words (info) and in parts (holder, and
 * left_ms when the holder's slice ends).  Other users' sessions are named
 * only with show_others = names; else "another notebook". */
static void wait_reply(gs_broker_t *self, const gs_session_t *waiter, const gs_sched_wait_t *w,
                       json_t *r)
{
    char text[700], who[480], more[32] = "";
    if (w->nholders == 0) {
        /* Its own memory on its way back from the disk tier, when it is. */
        char disk[160];
        if (waiter && gs_park_wait_words(self->park, waiter->id, disk, sizeof disk)) {
            snprintf(text, sizeof text, "queued: %s", disk);
            json_object_set_new(r, "info", json_string(text));
            return;
        }
        json_object_set_new(r, "info",
                            json_string("queued: the GPU is being handed over or made room on"));
        return;
    }
    gs_session_t *h = gs_sessions_session(self->sessions, w->holder, 0);
    /* The notebook's file name when its launcher knew it (JPY_SESSION_NAME);
     * never the kernel id, which is often a temporary file's name. */
    const char *nb = h && h->notebook[0] ? h->notebook : "";
    const char *slash = strrchr(nb, '/');
    nb = slash && slash[1] ? slash + 1 : nb;
    /* A session no launcher registered is a program (`gpushare run`, a
     * script), named by its session id: calling it a notebook misleads. */
    const char *what = h && !h->registered ? "program" : "notebook";
    if (!nb[0] && h && !h->registered)
        nb = h->name;
    char named[300] = "";
    if (nb[0])
        snprintf(named, sizeof named, " %.256s", nb);
    int own =
        h && waiter && h->owner_known && waiter->owner_known && h->owner_uid == waiter->owner_uid;
    if ((!self->show_others && !own) || !h || !h->user[0])
        snprintf(who, sizeof who, "another %s", what);
    else if (h->claimed[0]) /* the account, and what its launcher claimed */
        snprintf(who, sizeof who, "%.64s's %s%s (registered as user \"%.64s\")", h->user, what,
                 named, h->claimed);
    else
        snprintf(who, sizeof who, "%.64s's %s%s", h->user, what, named);
    if (w->nholders > 1)
        snprintf(more, sizeof more, " and %d more", w->nholders - 1);
    if (w->left_us == GS_SCHED_NEVER)
        snprintf(text, sizeof text, "held by %s%s until its cell ends", who, more);
    else
        snprintf(text, sizeof text, "held by %s%s for at most %.1f s", who, more, w->left_us / 1e6);
    json_object_set_new(r, "info", json_string(text));
    snprintf(text, sizeof text, "%s%s", who, more);
    json_object_set_new(r, "holder", json_string(text));
    if (w->left_us != GS_SCHED_NEVER)
        json_object_set_new(r, "left_ms",
                            json_integer(w->left_us > 0 ? (json_int_t)(w->left_us / 1000) : 0));
}

static void on_acquire(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    gs_client_t *c = client_gpu(self, peer, msg, &i);
    if (!c)
        return;
    json_t *seq = json_object_get(msg, "seq");
    c->acquire_seq[i] = json_is_integer(seq) ? (long long)json_integer_value(seq) : -1;
    int64_t now = gs_clock_now_us();
    gs_sched_acquire(self->sched, c->key, i, gs_msg_int(msg, "burst_p90_us", -1),
                     gs_msg_int(msg, "burst_last_us", -1), now);
    gs_settle(self);
    /* Not granted at once: say who holds the GPU and for how long at most,
     * for the line the waiting cell shows. */
    gs_sched_wait_t w;
    if (gs_sched_wait_info(self->sched, c->key, i, now, &w)) {
        json_t *r = gs_msg_new(GS_MSG_OK);
        wait_reply(self, gs_sessions_session(self->sessions, c->session, 0), &w, r);
        gs_reply_echo_seq(r, msg);
        gs_reply_send(self->router, peer, r);
    }
}

static void on_release(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    gs_client_t *c = client_gpu(self, peer, msg, &i);
    if (!c)
        return;
    gs_sched_release(self->sched, c->key, i, (uint64_t)gs_msg_int(msg, "grant_id", 0),
                     gs_clock_now_us());
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
        gs_settle_client_gone(self, key, GS_GONE_EXITED, "exited");
        return;
    }
    gs_settle(self);
}

static void on_memory(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    gs_client_t *c = client_gpu(self, peer, msg, &i);
    if (!c)
        return;
    uint64_t used = (uint64_t)gs_msg_int(msg, "used_bytes", 0);
    gs_sched_memory(self->sched, c->key, i, used, gs_clock_now_us());
    gs_park_on_memory(self->park, c->key, i, used, (uint64_t)gs_msg_int(msg, "movable_bytes", 0),
                      (uint64_t)gs_msg_int(msg, "swapped_bytes", 0),
                      (uint64_t)gs_msg_int(msg, "peak_bytes", 0), gs_clock_now_us());
    gs_settle(self);
}

/* A hook's answer to parking's swap_out / swap_in (park.h). */
static void on_swapped(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    gs_client_t *c = client_gpu(self, peer, msg, &i);
    if (!c)
        return;
    gs_park_on_swapped(self->park, c->key, i, msg, gs_clock_now_us());
    gs_settle(self);
}

/* Answered by parking (park.h), now or once victims are parked. */
static void on_make_room(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    gs_client_t *c = client_gpu(self, peer, msg, &i);
    if (!c)
        return;
    json_t *seq = json_object_get(msg, "seq");
    /* timeout_ms: how long the hook waits (it is then told why it waits);
     * a hook that does not say waits 30 s and is never told. */
    if (gs_park_make_room(self->park, peer, c->session, i, (uint64_t)gs_msg_int(msg, "bytes", 1),
                          json_is_integer(seq) ? (long long)json_integer_value(seq) : -1,
                          gs_msg_int(msg, "timeout_ms", 0), gs_clock_now_us()))
        gs_settle(self); /* parks victims; answers once there is room */
    else
        gs_settle_answers(self); /* refused at once */
}

/* A hook's heartbeat names its membership (epoch): one this broker no
 * longer has means that it dropped the hook (silent for 3 heartbeat
 * intervals, say, while its process was stopped), which then still
 * believes in its grants.  The answer tells it to stop and join again. */
static void on_heartbeat(gs_broker_t *self, zframe_t *peer, const json_t *msg,
                         const gs_client_t *known)
{
    long long epoch = gs_msg_int(msg, "epoch", 0);
    if (epoch <= 0 || (known && known->epoch == epoch))
        return; /* no membership named (launchers, the CLI), or the current one */
    char text[200];
    snprintf(text, sizeof text,
             "this broker no longer knows this client (epoch %lld%s): its grants are gone; "
             "join again",
             epoch, known ? ", joined again since" : ": dropped, e.g. for its silence");
    gs_reply_error(self->router, peer, msg, "unknown_client", text);
}

int gs_session_dispatch(gs_broker_t *self, zframe_t *peer, gs_msg_type_t type, const json_t *msg)
{
    gs_client_t *known = gs_sessions_client_lookup(self->sessions, peer);
    /* A routing id is chosen by the peer; the uid is not.  A client's
     * messages must keep coming from the uid that joined, so nobody can
     * speak for another user's hook by taking its routing id. */
    if (known && (!self->peer.valid || self->peer.uid != known->peer_uid)) {
        gs_reply_error(self->router, peer, msg, "permission_denied",
                       "this routing id belongs to another user's client");
        return 1;
    }
    if (known)
        known->last_seen_us = gs_clock_now_us(); /* any message is a sign of life */
    switch (type) {
    case GS_MSG_HEARTBEAT:
        on_heartbeat(self, peer, msg, known);
        return 1;
    case GS_MSG_REGISTER:
        on_register(self, peer, msg);
        return 1;
    case GS_MSG_UNREGISTER:
        on_unregister(self, peer, msg);
        return 1;
    case GS_MSG_CELL:
        on_cell(self, peer, msg);
        return 1;
    case GS_MSG_PARK:
        on_park(self, peer, msg);
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
