/*
 * settle.c - see settle.h.
 */
#include "settle.h"

#include <errno.h>

#include "clock.h"
#include "log.h"
#include "reply.h"
#include "session_place.h"
#include "wire.h"

/* A grant's or revoke's line in the event log.  A grant says its turn
 * (the grants of one turn share it) and its idle release; one
 * sent again only changes the idle release, and says so. */
static void log_action(gs_broker_t *b, const gs_client_t *c, const gs_sched_action_t *a)
{
    int grant = a->kind == GS_ACT_GRANT;
    json_t *e = json_pack("{s:s, s:i, s:s, s:I, s:I}", "session", c->session, "pid", (int)c->pid,
                          "gpu", b->inventory.gpus[a->gpu].uuid, "grant_id",
                          (json_int_t)a->grant_id, "quantum_us", (json_int_t)a->quantum_us);
    if (!e)
        return;
    if (!grant)
        json_object_set_new(e, "reason", json_string(a->reason));
    if (grant && a->turn)
        json_object_set_new(e, "turn", json_integer((json_int_t)a->turn));
    if (grant && a->idle_release_us > 0)
        json_object_set_new(e, "idle_release_us", json_integer((json_int_t)a->idle_release_us));
    if (grant && a->again)
        json_object_set_new(e, "again", json_true());
    gs_eventlog_write(b->eventlog, grant ? "grant" : "revoke", e);
}

static void send_actions(gs_broker_t *b)
{
    enum { MAX_DEAD = 16 };
    char dead[MAX_DEAD][64];
    int ndead = 0;
    gs_sched_action_t a;
    while (gs_sched_pop_action(b->sched, &a)) {
        gs_client_t *c = gs_sessions_client_by_key(b->sessions, a.client);
        if (!c || a.gpu < 0 || a.gpu >= b->inventory.count)
            continue;
        json_t *m;
        if (a.kind == GS_ACT_GRANT) {
            m = gs_msg_new(GS_MSG_GRANT);
            json_object_set_new(m, "quantum_us", json_integer((json_int_t)a.quantum_us));
            if (a.idle_release_us > 0) /* a switch is wanted: give it back sooner when idle */
                json_object_set_new(m, "idle_release_us",
                                    json_integer((json_int_t)a.idle_release_us));
            if (c->acquire_seq[a.gpu] >= 0)
                json_object_set_new(m, "seq", json_integer(c->acquire_seq[a.gpu]));
            if (c->epoch > 0) /* the hook refuses a grant of a membership it left */
                json_object_set_new(m, "epoch", json_integer(c->epoch));
        } else {
            m = gs_msg_new(GS_MSG_REVOKE);
            json_object_set_new(m, "reason", json_string(a.reason));
        }
        json_object_set_new(m, "device", json_string(b->inventory.gpus[a.gpu].uuid));
        json_object_set_new(m, "grant_id", json_integer((json_int_t)a.grant_id));
        if (b->eventlog) /* the fields cost allocations: none without a log */
            log_action(b, c, &a);
        gs_debug("%s %llu to pid %ld (session %s, GPU %d)%s%s",
                 a.kind == GS_ACT_GRANT ? "grant" : "revoke", (unsigned long long)a.grant_id,
                 c->pid, c->session, a.gpu, a.reason ? ": " : "", a.reason ? a.reason : "");
        gs_perr_t err;
        if (gs_wire_send(b->router, c->identity, m, &err) != 0) {
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
        gs_settle_client_gone(b, dead[i], GS_GONE_DROPPED, "its connection is gone");
}

void gs_settle_answers(gs_broker_t *b)
{
    zframe_t *peer;
    json_t *answer;
    while ((answer = gs_park_next_answer(b->park, &peer)) != NULL) {
        gs_reply_send(b->router, peer, answer);
        zframe_destroy(&peer);
    }
}

/* Parking looks at every change too (park.h): it may park or unpark
 * sessions, which the scheduler turns into more actions. */
void gs_settle(gs_broker_t *b)
{
    for (int round = 0; round < 8; round++) {
        send_actions(b);
        int changed = gs_park_poll(b->park, gs_clock_now_us());
        gs_settle_answers(b);
        if (!changed)
            break;
    }
    send_actions(b);
}

void gs_settle_forget_session(gs_broker_t *b, const char *id)
{
    gs_session_t *s = gs_sessions_session(b->sessions, id, 0);
    if (s && !s->registered && !gs_sched_has_session(b->sched, id)) {
        gs_session_place_gone(b, id);
        gs_sessions_session_remove(b->sessions, id);
    }
}

void gs_settle_client_gone(gs_broker_t *b, const char *key, gs_gone_t how, const char *why)
{
    gs_client_t *c = gs_sessions_client_by_key(b->sessions, key);
    if (!c)
        return;
    char session[sizeof c->session];
    snprintf(session, sizeof session, "%s", c->session);
    int64_t now = gs_clock_now_us();
    if (session[0]) {
        int grants = gs_sched_client_grants(b->sched, key);
        gs_info("pid %ld of session %s is gone (%s)%s", c->pid, session, why,
                grants > 0 ? ": its grant is released" : "");
        gs_sched_client_gone(b->sched, key, now);
        gs_eventlog_write(
            b->eventlog, "client_gone",
            json_pack("{s:s, s:i, s:s}", "session", session, "pid", (int)c->pid, "why", why));
    }
    gs_park_on_client_gone(b->park, key, how == GS_GONE_EXITED, now);
    gs_sessions_client_remove(b->sessions, c);
    if (session[0])
        gs_settle_forget_session(b, session);
    gs_settle(b);
}

void gs_settle_end_session(gs_broker_t *b, const char *id)
{
    gs_session_t *s = gs_sessions_session(b->sessions, id, 0);
    if (!s)
        return;
    char copy[sizeof s->id];
    snprintf(copy, sizeof copy, "%s", id); /* id may be s->id, freed below */
    s->registered = 0;
    s->cell_busy = 0;
    gs_sched_unregister(b->sched, copy, gs_clock_now_us());
    gs_settle_forget_session(b, copy);
    gs_settle(b);
}

void gs_settle_launcher_gone(gs_broker_t *b, const char *id, const char *why)
{
    gs_session_t *s = gs_sessions_session(b->sessions, id, 0);
    if (!s)
        return;
    s->registrar_gone = 1;
    gs_info("session %s: %s; its cells are no longer reported%s", s->id, why,
            s->cell_busy ? ": its cell counts as over" : "");
    if (!s->cell_busy)
        return;
    s->cell_busy = 0;
    gs_eventlog_write(b->eventlog, "cell",
                      json_pack("{s:s, s:s, s:s, s:s}", "session", s->id, "state", "idle", "msg_id",
                                s->cell_msg_id, "why", why));
    gs_sched_cell(b->sched, s->id, 0, gs_clock_now_us());
    gs_settle(b);
}
