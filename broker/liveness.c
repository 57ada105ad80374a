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
 */
#include "liveness.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

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

/* 0 when the process is gone or a zombie; 1 when it exists (or we cannot
 * tell). */
static int process_alive(long pid)
{
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return 0;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')'); /* the name may contain anything */
    if (!close_paren || close_paren[1] != ' ')
        return 1;
    return close_paren[2] != 'Z' && close_paren[2] != 'X';
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
        if (c->peer_pid > 0 && !process_alive(c->peer_pid))
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
