/*
 * liveness.c - noticing dead clients, so that a killed notebook's grant and
 * memory go back to the others at once (see liveness.h).
 *
 * Three signs, because none is enough alone:
 *  - ZeroMQ disconnect events (the ROUTER's monitor, read by conn_guard.c).
 *    Debian's libzmq 4.3.4 is built without the draft API, so
 *    ZMQ_ROUTER_NOTIFY is
 *    not available and monitor events carry an fd, not a routing id.  A
 *    disconnect therefore triggers checks of every client's process: now
 *    and a few times in the next 150 ms (a killed process closes its sockets
 *    a moment before it becomes a zombie).
 *  - the process: the peer's pid from the connection's credentials is dead
 *    when kill(pid, 0) fails with ESRCH or /proc says zombie.  Pids from
 *    messages are only informational (another pid namespace may send them),
 *    so a client without credentials is never judged by pid.
 *  - heartbeats: a client silent for 3 heartbeat intervals is dead (a hung
 *    or stopped process, a lost connection without an event).
 * The periodic check runs every heartbeat interval.
 *
 * Sessions too: a launcher's watcher killed with SIGKILL never sends its
 * cell idle or unregister, and left its session "cell busy" for ever, even
 * after the kernel was gone.  A registered session's known processes are
 * its registrar (credentials), its kernel (the registrar's word, taken
 * only from a local registrar) and its hooks (credentials).  When the
 * registrar is gone its cells are no longer reported; when none is left,
 * the session ends.  Start times tell a reused pid from the process that
 * had it.  A session registered without credentials (another host) is
 * never judged: nothing of it can be checked here.
 */
#include "liveness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc_alive.h"

static const int64_t recheck_after_us[4] = {0, 20000, 60000, 150000};

struct gs_liveness {
    int64_t heartbeat_us;  /* the clients' heartbeat interval */
    int64_t next_sweep_us; /* periodic check of every client */
    int64_t recheck_us[4]; /* checks soon after a disconnect, 0 = unused */
};

gs_liveness_t *gs_liveness_new(int heartbeat_ms, int64_t now, char *err, size_t errlen)
{
    gs_liveness_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    self->heartbeat_us = (int64_t)heartbeat_ms * 1000;
    self->next_sweep_us = now + self->heartbeat_us;
    return self;
}

void gs_liveness_destroy(gs_liveness_t **self_p)
{
    gs_liveness_t *self = *self_p;
    if (!self)
        return;
    free(self);
    *self_p = NULL;
}

void gs_liveness_on_disconnect(gs_liveness_t *self, int64_t now)
{
    for (int i = 0; i < 4; i++)
        self->recheck_us[i] = now + recheck_after_us[i];
}

int gs_liveness_due(gs_liveness_t *self, int64_t now, int *check_silence)
{
    int due = 0;
    for (int i = 0; i < 4; i++)
        if (self->recheck_us[i] && self->recheck_us[i] <= now) {
            self->recheck_us[i] = 0;
            due = 1;
        }
    int periodic = self->next_sweep_us && now >= self->next_sweep_us;
    if (periodic)
        self->next_sweep_us = now + self->heartbeat_us;
    *check_silence = periodic;
    return due || periodic;
}

int gs_liveness_find_dead(const gs_liveness_t *self, gs_sessions_t *sessions, int64_t now,
                          int check_silence, gs_liveness_dead_t *dead, int max)
{
    int64_t silent_us = 3 * self->heartbeat_us;
    int n = 0;
    for (gs_client_t *c = gs_sessions_first_client(sessions); c && n < max;
         c = gs_sessions_next_client(sessions)) {
        dead[n].exited = c->peer_pid > 0 && !gs_proc_alive(c->peer_pid, 0);
        if (dead[n].exited)
            dead[n].why = "its process died";
        else if (check_silence && c->last_seen_us && now - c->last_seen_us > silent_us)
            dead[n].why = "silent for 3 heartbeat intervals";
        else
            continue;
        snprintf(dead[n++].key, sizeof dead[0].key, "%s", c->key);
    }
    return n;
}

int64_t gs_liveness_next_deadline(const gs_liveness_t *self)
{
    int64_t t = self->next_sweep_us ? self->next_sweep_us : INT64_MAX;
    for (int i = 0; i < 4; i++)
        if (self->recheck_us[i] && self->recheck_us[i] < t)
            t = self->recheck_us[i];
    return t;
}

/* 1 when a hook client of session id is in the table (the dead ones were
 * dropped first: gs_liveness_find_dead). */
static int has_clients(gs_sessions_t *sessions, const char *id)
{
    for (gs_client_t *c = gs_sessions_first_client(sessions); c;
         c = gs_sessions_next_client(sessions))
        if (!strcmp(c->session, id))
            return 1;
    return 0;
}

int gs_liveness_find_orphans(const gs_liveness_t *self, gs_sessions_t *sessions,
                             gs_liveness_orphan_t *out, int max)
{
    (void)self;
    int n = 0;
    for (gs_session_t *s = gs_sessions_first_session(sessions); s && n < max;
         s = gs_sessions_next_session(sessions)) {
        if (!s->registered || s->registrar_pid <= 0)
            continue; /* made for a hook (ends with its clients), or not judged */
        int registrar = !s->registrar_gone && gs_proc_alive(s->registrar_pid, s->registrar_start);
        if (registrar)
            continue;
        int kernel = s->kernel_pid > 0 && gs_proc_alive(s->kernel_pid, s->kernel_start);
        gs_liveness_orphan_t *o = &out[n];
        if (!kernel && !has_clients(sessions, s->id)) {
            o->ended = 1;
            snprintf(o->why, sizeof o->why,
                     "no process of it is left (launcher pid %ld, kernel pid %ld)",
                     (long)s->registrar_pid, s->kernel_pid);
        } else if (!s->registrar_gone) {
            o->ended = 0;
            snprintf(o->why, sizeof o->why, "its launcher (pid %ld) is gone",
                     (long)s->registrar_pid);
        } else
            continue; /* already told; its kernel or hooks live on */
        snprintf(o->id, sizeof o->id, "%s", s->id);
        n++;
    }
    return n;
}
