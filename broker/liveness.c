/*
 * liveness.c - noticing dead clients, so that a killed notebook's grant and
 * memory go back to the others at once (see broker_internal.h).
 *
 * Three signs, because none is enough alone:
 *  - ZeroMQ disconnect events (zmq_socket_monitor on the ROUTER).  Debian's
 *    libzmq 4.3.4 is built without the draft API, so ZMQ_ROUTER_NOTIFY is
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
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "broker_internal.h"
#include "log.h"

static const int64_t recheck_after_us[4] = {0, 20000, 60000, 150000};

int gs_liveness_start(gs_broker_t *self, char *err, size_t errlen)
{
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://gpushare-broker-monitor-%p", (void *)self);
    void *router = zsock_resolve(self->router);
    if (zmq_socket_monitor(router, ep, ZMQ_EVENT_DISCONNECTED) != 0) {
        snprintf(err, errlen, "cannot monitor the socket: %s", zmq_strerror(zmq_errno()));
        return -1;
    }
    self->monitor = zmq_socket(zsys_init(), ZMQ_PAIR);
    if (!self->monitor || zmq_connect(self->monitor, ep) != 0) {
        snprintf(err, errlen, "cannot monitor the socket: %s", zmq_strerror(zmq_errno()));
        return -1;
    }
    self->next_sweep_us = gs_broker_now_us() + (int64_t)self->opt.heartbeat_ms * 1000;
    return 0;
}

void gs_liveness_stop(gs_broker_t *self)
{
    if (self->router)
        zmq_socket_monitor(zsock_resolve(self->router), NULL, 0);
    if (self->monitor) {
        zmq_close(self->monitor);
        self->monitor = NULL;
    }
}

/* Drain the monitor; any disconnect schedules checks of every client. */
void gs_liveness_on_monitor(gs_broker_t *self)
{
    int disconnects = 0;
    for (;;) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, self->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part);
            break;
        }
        if (zmq_msg_size(&part) >= 2) {
            uint16_t event;
            memcpy(&event, zmq_msg_data(&part), sizeof event);
            disconnects += event == ZMQ_EVENT_DISCONNECTED;
        }
        int more = zmq_msg_more(&part);
        zmq_msg_close(&part);
        while (more) { /* the event's address frame */
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, self->monitor, ZMQ_DONTWAIT) < 0)
                more = 0;
            else
                more = zmq_msg_more(&part);
            zmq_msg_close(&part);
        }
    }
    if (!disconnects)
        return;
    int64_t now = gs_broker_now_us();
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

static void sweep(gs_broker_t *self, int64_t now, int check_silence)
{
    enum { BATCH = 64 };
    int64_t silent_us = 3 * (int64_t)self->opt.heartbeat_ms * 1000;
    for (;;) { /* removing changes the table: collect, remove, look again */
        char keys[BATCH][64];
        const char *why[BATCH];
        int n = 0;
        for (gs_client_t *c = gs_sessions_first_client(self->sessions); c && n < BATCH;
             c = gs_sessions_next_client(self->sessions)) {
            if (c->peer_pid > 0 && !process_alive(c->peer_pid))
                why[n] = "its process died";
            else if (check_silence && c->last_seen_us && now - c->last_seen_us > silent_us)
                why[n] = "silent for 3 heartbeat intervals";
            else
                continue;
            snprintf(keys[n++], sizeof keys[0], "%s", c->key);
        }
        for (int i = 0; i < n; i++)
            gs_broker_client_gone(self, keys[i], why[i]);
        if (n < BATCH)
            return;
    }
}

void gs_liveness_check(gs_broker_t *self, int64_t now)
{
    int due = 0;
    for (int i = 0; i < 4; i++)
        if (self->recheck_us[i] && self->recheck_us[i] <= now) {
            self->recheck_us[i] = 0;
            due = 1;
        }
    int periodic = self->next_sweep_us && now >= self->next_sweep_us;
    if (periodic)
        self->next_sweep_us = now + (int64_t)self->opt.heartbeat_ms * 1000;
    if (due || periodic)
        sweep(self, now, periodic);
}

int64_t gs_liveness_next_deadline(const gs_broker_t *self)
{
    int64_t t = self->next_sweep_us ? self->next_sweep_us : INT64_MAX;
    for (int i = 0; i < 4; i++)
        if (self->recheck_us[i] && self->recheck_us[i] < t)
            t = self->recheck_us[i];
    return t;
}
