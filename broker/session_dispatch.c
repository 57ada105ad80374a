/*
 * session_dispatch.c - register/unregister/cell from launchers, join,
 * acquire, release, memory and heartbeat from hooks.
 *
 * Grants: until the scheduling policies land, the broker grants every
 * acquire at once (quantum 0: until revoked) and only monitors, which is
 * what "scheduler off" means; status says so in its "note".
 */
#include <string.h>
#include <unistd.h>

#include "broker_internal.h"
#include "log.h"

int gs_broker_gpu_index(const gs_broker_t *self, const char *uuid)
{
    for (int i = 0; i < self->inventory.count; i++)
        if (strcmp(self->inventory.gpus[i].uuid, uuid) == 0)
            return i;
    return -1;
}

static void reply_ok(gs_broker_t *self, zframe_t *peer, const json_t *req, const char *session)
{
    json_t *ok = gs_msg_new(GS_MSG_OK);
    if (session)
        json_object_set_new(ok, "session", json_string(session));
    gs_broker_echo_seq(ok, req);
    gs_broker_reply(self, peer, ok);
}

static void on_register(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    const char *kernel_id = gs_msg_str(msg, "kernel_id", "");
    gs_session_t *s = gs_sessions_session(self->sessions, kernel_id, 1);
    if (!s) {
        gs_broker_reply_error(self, peer, msg, "internal", "out of memory");
        return;
    }
    s->registered = 1;
    snprintf(s->kernel_id, sizeof s->kernel_id, "%s", kernel_id);
    snprintf(s->user, sizeof s->user, "%s", gs_msg_str(msg, "user", ""));
    snprintf(s->notebook, sizeof s->notebook, "%s", gs_msg_str(msg, "notebook", ""));
    s->kernel_pid = (long)gs_msg_int(msg, "pid", 0);
    gs_info("session %s registered: user %s, notebook \"%s\", kernel pid %ld", s->id, s->user,
            s->notebook, s->kernel_pid);
    json_t *r = gs_msg_new(GS_MSG_REGISTERED);
    json_object_set_new(r, "session", json_string(s->id));
    gs_broker_echo_seq(r, msg);
    gs_broker_reply(self, peer, r);
}

static gs_session_t *known_session(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    const char *id = gs_msg_str(msg, "session", "");
    gs_session_t *s = gs_sessions_session(self->sessions, id, 0);
    if (!s) {
        char text[200];
        snprintf(text, sizeof text, "no session \"%.128s\"", id);
        gs_broker_reply_error(self, peer, msg, "unknown_session", text);
    }
    return s;
}

static void on_unregister(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    gs_session_t *s = known_session(self, peer, msg);
    if (!s)
        return;
    gs_info("session %s unregistered", s->id);
    gs_sessions_session_remove(self->sessions, s->id);
    reply_ok(self, peer, msg, NULL);
}

static void on_cell(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    gs_session_t *s = known_session(self, peer, msg);
    if (!s)
        return;
    s->cell_busy = strcmp(gs_msg_str(msg, "state", "idle"), "busy") == 0;
    snprintf(s->cell_msg_id, sizeof s->cell_msg_id, "%s", gs_msg_str(msg, "msg_id", ""));
    gs_debug("session %s cell %s", s->id, s->cell_busy ? "busy" : "idle");
}

static void on_join(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    gs_client_t *c = gs_sessions_client(self->sessions, peer);
    if (!c) {
        gs_broker_reply_error(self, peer, msg, "internal", "out of memory");
        return;
    }
    c->pid = (long)gs_msg_int(msg, "pid", 0);
    const char *session = gs_msg_str(msg, "session", NULL);
    char made[32];
    if (!session) {
        snprintf(made, sizeof made, "p%ld", c->pid);
        session = made;
    }
    gs_session_t *s = gs_sessions_session(self->sessions, session, 1);
    snprintf(c->session, sizeof c->session, "%s", s->id);
    snprintf(c->role, sizeof c->role, "hook");
    gs_debug("pid %ld joined session %s", c->pid, s->id);
    reply_ok(self, peer, msg, s->id);
}

/* The client's per-GPU record for the message's device, or NULL after an
 * error reply. */
static gs_client_gpu_t *client_gpu(gs_broker_t *self, zframe_t *peer, const json_t *msg,
                                   int *index)
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
    return &c->gpu[i];
}

static void on_acquire(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    gs_client_gpu_t *g = client_gpu(self, peer, msg, &i);
    if (!g)
        return;
    if (!g->grant_id) {
        g->grant_id = ++self->next_grant_id;
        g->grants++;
    }
    g->waiting = 0;
    json_t *grant = gs_msg_new(GS_MSG_GRANT);
    json_object_set_new(grant, "device", json_string(self->inventory.gpus[i].uuid));
    json_object_set_new(grant, "grant_id", json_integer((json_int_t)g->grant_id));
    json_object_set_new(grant, "quantum_us", json_integer(0));
    gs_broker_echo_seq(grant, msg);
    gs_broker_reply(self, peer, grant);
}

static void on_release(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    gs_client_t *c = gs_sessions_client_lookup(self->sessions, peer);
    gs_client_gpu_t *g = client_gpu(self, peer, msg, &i);
    if (!g)
        return;
    if (g->grant_id == (uint64_t)gs_msg_int(msg, "grant_id", 0))
        g->grant_id = 0;
    if (strcmp(gs_msg_str(msg, "reason", ""), "exit") == 0 && c) {
        int holds = 0;
        for (int k = 0; k < GS_MAX_GPUS; k++)
            holds |= c->gpu[k].grant_id != 0;
        if (!holds)
            gs_sessions_client_remove(self->sessions, c);
    }
}

static void on_memory(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    gs_client_gpu_t *g = client_gpu(self, peer, msg, &i);
    if (!g)
        return;
    g->used_bytes = (uint64_t)gs_msg_int(msg, "used_bytes", 0);
    if (g->used_bytes > g->peak_bytes)
        g->peak_bytes = g->used_bytes;
}

static void on_make_room(gs_broker_t *self, zframe_t *peer, const json_t *msg)
{
    int i;
    if (!client_gpu(self, peer, msg, &i))
        return;
    json_t *room = gs_msg_new(GS_MSG_ROOM);
    json_object_set_new(room, "device", json_string(self->inventory.gpus[i].uuid));
    json_object_set_new(room, "ok", json_false());
    json_object_set_new(room, "reason", json_string("parking is not implemented yet"));
    gs_broker_echo_seq(room, msg);
    gs_broker_reply(self, peer, room);
}

int gs_broker_dispatch_session(gs_broker_t *self, zframe_t *peer, gs_msg_type_t type,
                               const json_t *msg)
{
    switch (type) {
    case GS_MSG_REGISTER: on_register(self, peer, msg); return 1;
    case GS_MSG_UNREGISTER: on_unregister(self, peer, msg); return 1;
    case GS_MSG_CELL: on_cell(self, peer, msg); return 1;
    case GS_MSG_JOIN: on_join(self, peer, msg); return 1;
    case GS_MSG_ACQUIRE: on_acquire(self, peer, msg); return 1;
    case GS_MSG_RELEASE: on_release(self, peer, msg); return 1;
    case GS_MSG_MEMORY: on_memory(self, peer, msg); return 1;
    case GS_MSG_MAKE_ROOM: on_make_room(self, peer, msg); return 1;
    default: return 0;
    }
}
