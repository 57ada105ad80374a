/*
 * broker_link.c - registration, cell events and heartbeats to the broker
 * (see broker_link.h).
 *
 * One attempt = a fresh DEALER socket: hello is queued right after connect,
 * register once the welcome came from a broker this user may trust (the
 * socket is checked before connecting and the welcome's credentials after,
 * see socket_trust.h: a kernel's id and notebook go to no one else), and
 * `registered` must come back within ATTEMPT_MS of the connect.  A
 * socket monitor reports the connection dropping (the broker stopped, or
 * ZMTP heartbeats went unanswered because it hangs); the link then throws
 * the socket away, with whatever it had queued, and starts over.  A fresh
 * socket per attempt means a restarted broker always sees hello first.
 */
#include "broker_link.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "endpoint.h"
#include "log.h"
#include "socket_trust.h"
#include "wire.h"

#define ATTEMPT_MS    1000 /* hello+register to registered */
#define RETRY_MIN_MS  100
#define RETRY_MAX_MS  2000
#define REFUSED_MS    5000 /* pause after the broker refused register */
#define ZMTP_HB_IVL   1000
#define ZMTP_HB_TIMEO 3000

typedef enum { LINK_DOWN = 0, LINK_WAITING, LINK_UP } link_state_t;

struct gs_broker_link {
    char *kernel_id, *user, *notebook;
    long kernel_pid;
    link_state_t state;
    zsock_t *sock, *monitor;
    char endpoint[256];
    int64_t next_attempt, deadline, next_heartbeat;
    int retry_ms;
    int heartbeat_ms;
    long long seq, hello_seq, register_seq;
    unsigned attempts;
    int warned;      /* the one warning about a missing broker was written */
    int note_warned; /* the one warning about an unusable per-user socket */
    int refused_warned;
    char session[129];
    int busy;          /* the cell state the broker should know */
    int notebook_late; /* the notebook changed after the register in flight went */
    char msg_id[257];
};

static char *dup_or_null(const char *s)
{
    return s && *s ? strdup(s) : NULL;
}

gs_broker_link_t *gs_link_new(const gs_link_identity_t *id)
{
    gs_broker_link_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->kernel_id = strdup(id->kernel_id);
    self->user = strdup(id->user && *id->user ? id->user : "unknown");
    self->notebook = dup_or_null(id->notebook);
    self->kernel_pid = id->kernel_pid;
    self->retry_ms = RETRY_MIN_MS;
    self->heartbeat_ms = 1000;
    return self;
}

static void close_socket(gs_broker_link_t *self)
{
    if (self->sock)
        zmq_socket_monitor(zsock_resolve(self->sock), NULL, 0);
    zsock_destroy(&self->monitor);
    zsock_destroy(&self->sock);
}

void gs_link_destroy(gs_broker_link_t **self_p)
{
    gs_broker_link_t *self = *self_p;
    if (!self)
        return;
    close_socket(self);
    free(self->kernel_id);
    free(self->user);
    free(self->notebook);
    free(self);
    *self_p = NULL;
}

const char *gs_link_session(const gs_broker_link_t *self)
{
    return self->session;
}

static int send_msg(gs_broker_link_t *self, json_t *msg)
{
    gs_perr_t perr;
    int rc = self->sock ? gs_wire_send(self->sock, NULL, msg, &perr) : -1;
    if (rc != 0 && self->sock)
        gs_debug("cannot send %s to the broker: %s",
                 json_string_value(json_object_get(msg, "type")),
                 perr.code ? perr.text : zmq_strerror(zmq_errno()));
    json_decref(msg);
    return rc;
}

/* The attempt failed or the connection went: drop the socket, try again
 * after a pause.  The first time, and only then, a warning. */
static void fail(gs_broker_link_t *self, int64_t now, const char *why)
{
    if (!self->warned) {
        if (self->state == LINK_UP)
            gs_warn("lost the gpushare broker at %s (%s): kernel %s runs without cell-driven "
                    "GPU scheduling until it is back; retrying in the background",
                    self->endpoint, why, self->kernel_id);
        else
            gs_warn("no gpushare broker (%s): kernel %s runs without cell-driven GPU "
                    "scheduling until one answers; retrying in the background",
                    why, self->kernel_id);
        self->warned = 1;
    } else {
        gs_debug("broker attempt %u failed: %s", self->attempts, why);
    }
    close_socket(self);
    self->state = LINK_DOWN;
    self->next_attempt = now + self->retry_ms;
    self->retry_ms = self->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : self->retry_ms * 2;
}

static void send_register(gs_broker_link_t *self)
{
    json_t *reg = gs_msg_new(GS_MSG_REGISTER);
    self->register_seq = ++self->seq;
    json_object_set_new(reg, "seq", json_integer(self->register_seq));
    json_object_set_new(reg, "kernel_id", json_string(self->kernel_id));
    json_object_set_new(reg, "user", json_string(self->user));
    if (self->notebook)
        json_object_set_new(reg, "notebook", json_string(self->notebook));
    json_object_set_new(reg, "pid", json_integer(self->kernel_pid));
    send_msg(self, reg);
}

static void attempt(gs_broker_link_t *self, int64_t now)
{
    char err[600], note[600];
    self->attempts++;
    if (gs_endpoint_for_client(self->endpoint, sizeof self->endpoint, note, sizeof note, err,
                               sizeof err) != 0) {
        fail(self, now, err);
        return;
    }
    if (note[0] && !self->note_warned) {
        gs_warn("%s", note);
        self->note_warned = 1;
    }
    const char *path = gs_endpoint_ipc_path(self->endpoint);
    if (path &&
        gs_trust_probe(path, gs_endpoint_is_user_socket(path), err, sizeof err) != GS_PROBE_OK) {
        fail(self, now, err);
        return;
    }
    self->sock = zsock_new(ZMQ_DEALER);
    if (!self->sock) {
        fail(self, now, "cannot create a ZeroMQ socket");
        return;
    }
    zsock_set_linger(self->sock, 0);
    zsock_set_maxmsgsize(self->sock, GS_PROTO_MAX_SIZE); /* a larger frame drops the link */
    zsock_set_rcvtimeo(self->sock, 0);
    zsock_set_sndtimeo(self->sock, 0);
    zsock_set_heartbeat_ivl(self->sock, ZMTP_HB_IVL);
    zsock_set_heartbeat_timeout(self->sock, ZMTP_HB_TIMEO);
    char mon[64];
    snprintf(mon, sizeof mon, "inproc://gs-link-monitor-%u", self->attempts);
    if (zmq_socket_monitor(zsock_resolve(self->sock), mon, ZMQ_EVENT_DISCONNECTED) == 0)
        self->monitor = zsock_new_pair(mon);
    if (self->monitor)
        zsock_set_rcvtimeo(self->monitor, 0);
    if (zsock_connect(self->sock, "%s", self->endpoint) < 0) {
        snprintf(err, sizeof err, "cannot connect to %s: %s", self->endpoint,
                 zmq_strerror(zmq_errno()));
        fail(self, now, err);
        return;
    }
    json_t *hello = gs_msg_new(GS_MSG_HELLO);
    self->hello_seq = ++self->seq;
    self->register_seq = -1; /* sent after a trusted welcome */
    self->notebook_late = 0; /* that one carries the notebook known now */
    json_object_set_new(hello, "seq", json_integer(self->hello_seq));
    json_object_set_new(hello, "role", json_string("launcher"));
    json_object_set_new(hello, "pid", json_integer(getpid()));
    json_object_set_new(hello, "session", json_string(self->kernel_id));
    json_object_set_new(hello, "client_version", json_string(PACKAGE_VERSION));
    send_msg(self, hello);
    self->state = LINK_WAITING;
    self->deadline = now + ATTEMPT_MS;
}

static void send_cell(gs_broker_link_t *self)
{
    json_t *cell = gs_msg_new(GS_MSG_CELL);
    json_object_set_new(cell, "session", json_string(self->session));
    json_object_set_new(cell, "state", json_string(self->busy ? "busy" : "idle"));
    json_object_set_new(cell, "msg_id", json_string(self->msg_id));
    send_msg(self, cell);
}

static void on_registered(gs_broker_link_t *self, const json_t *msg, int64_t now)
{
    const char *session = gs_msg_str(msg, "session", "");
    if (strcmp(session, self->kernel_id) != 0)
        gs_warn("the broker named kernel %s's session \"%s\", but the kernel's processes "
                "join session \"%s\"; their GPU work is not tied to this notebook's cells",
                self->kernel_id, session, self->kernel_id);
    if (self->notebook_late) { /* the notebook came after that register went */
        self->notebook_late = 0;
        send_register(self);
    }
    if (self->warned || self->attempts > 1)
        gs_info("registered with the broker at %s as session %s", self->endpoint, session);
    else
        gs_debug("registered with the broker at %s as session %s", self->endpoint, session);
    snprintf(self->session, sizeof self->session, "%s", session);
    self->state = LINK_UP;
    self->warned = 0; /* losing it again is worth one more line */
    self->retry_ms = RETRY_MIN_MS;
    self->next_heartbeat = now + self->heartbeat_ms / 2;
    /* A broker that came (back) mid-cell learns that the cell runs. */
    if (self->busy)
        send_cell(self);
}

static void on_error(gs_broker_link_t *self, const json_t *msg, int64_t now)
{
    const char *code = gs_msg_str(msg, "code", "");
    long long seq = gs_msg_int(msg, "seq", -1);
    if ((seq == self->register_seq || seq == self->hello_seq) && self->state == LINK_WAITING) {
        if (!self->refused_warned)
            gs_warn("the broker at %s refused %s kernel %s: %s (%s); retrying", self->endpoint,
                    seq == self->hello_seq ? "the connection of the launcher of" : "to register",
                    self->kernel_id, gs_msg_str(msg, "message", ""), code);
        self->refused_warned = 1;
        close_socket(self);
        self->state = LINK_DOWN;
        self->next_attempt = now + REFUSED_MS;
    } else if (strcmp(code, "unknown_session") == 0 && self->state == LINK_UP) {
        /* The broker forgot the session (restarted without us noticing, or
         * someone unregistered it): register again. */
        gs_info("the broker forgot session %s; registering again", self->session);
        send_register(self);
        self->state = LINK_WAITING;
        self->deadline = now + ATTEMPT_MS;
    } else {
        gs_debug("broker error: %s: %s", code, gs_msg_str(msg, "message", ""));
    }
}

/* The welcome of the current attempt: from a broker we trust, register. */
static void on_welcome(gs_broker_link_t *self, const json_t *msg, const gs_peer_t *peer,
                       int64_t now)
{
    if (self->state != LINK_WAITING || gs_msg_int(msg, "seq", -1) != self->hello_seq)
        return;
    char why[400];
    if (gs_trust_peer(peer, self->endpoint, why, sizeof why) != 0) {
        fail(self, now, why);
        self->next_attempt = now + REFUSED_MS;
        return;
    }
    self->heartbeat_ms = (int)gs_msg_int(msg, "heartbeat_ms", 1000);
    if (self->heartbeat_ms < 20)
        self->heartbeat_ms = 20;
    send_register(self);
}

static void read_broker(gs_broker_link_t *self, int64_t now)
{
    for (int i = 0; i < 64 && self->sock; i++) {
        gs_msg_type_t type;
        gs_perr_t perr;
        gs_peer_t peer;
        json_t *msg = gs_wire_recv(self->sock, NULL, &type, &perr, NULL, &peer);
        if (!msg) {
            if (perr.code != GS_PERR_NONE)
                gs_debug("malformed message from the broker: %s", perr.text);
            if (perr.code == GS_PERR_NONE)
                return;
            continue;
        }
        switch (type) {
        case GS_MSG_WELCOME:
            on_welcome(self, msg, &peer, now);
            break;
        case GS_MSG_REGISTERED:
            if (self->state == LINK_WAITING && gs_msg_int(msg, "seq", -1) == self->register_seq)
                on_registered(self, msg, now);
            break;
        case GS_MSG_ERROR:
            on_error(self, msg, now);
            break;
        default:
            break;
        }
        json_decref(msg);
    }
}

/* 1 when the monitor reported the connection dropping. */
static int disconnected(gs_broker_link_t *self)
{
    int gone = 0;
    while (self->monitor) {
        zmsg_t *ev = zmsg_recv(self->monitor);
        if (!ev)
            break;
        zframe_t *f = zmsg_first(ev);
        if (f && zframe_size(f) >= 2) {
            uint16_t event;
            memcpy(&event, zframe_data(f), 2);
            gone |= event == ZMQ_EVENT_DISCONNECTED;
        }
        zmsg_destroy(&ev);
    }
    return gone;
}

int gs_link_items(gs_broker_link_t *self, zmq_pollitem_t *items, int max)
{
    int n = 0;
    if (self->sock && n < max)
        items[n++] = (zmq_pollitem_t){.socket = zsock_resolve(self->sock), .events = ZMQ_POLLIN};
    if (self->monitor && n < max)
        items[n++] = (zmq_pollitem_t){.socket = zsock_resolve(self->monitor), .events = ZMQ_POLLIN};
    return n;
}

long gs_link_timeout_ms(gs_broker_link_t *self, int64_t now)
{
    int64_t at = self->state == LINK_DOWN      ? self->next_attempt
                 : self->state == LINK_WAITING ? self->deadline
                                               : self->next_heartbeat;
    return at <= now ? 0 : (long)(at - now);
}

void gs_link_tick(gs_broker_link_t *self, int64_t now)
{
    if (self->sock) {
        read_broker(self, now);
        if (self->sock && disconnected(self)) {
            fail(self, now, "the connection dropped");
            self->next_attempt = now + RETRY_MIN_MS;
        }
    }
    switch (self->state) {
    case LINK_DOWN:
        if (now >= self->next_attempt)
            attempt(self, now);
        break;
    case LINK_WAITING:
        if (now >= self->deadline) {
            char why[320];
            snprintf(why, sizeof why, "no reply from %s within %d ms", self->endpoint, ATTEMPT_MS);
            fail(self, now, why);
        }
        break;
    case LINK_UP:
        if (now >= self->next_heartbeat) {
            send_msg(self, gs_msg_new(GS_MSG_HEARTBEAT));
            self->next_heartbeat = now + self->heartbeat_ms / 2;
        }
        break;
    }
}

void gs_link_set_notebook(gs_broker_link_t *self, const char *notebook)
{
    char *copy = dup_or_null(notebook);
    if (!copy)
        return;
    free(self->notebook);
    self->notebook = copy;
    /* Registered: register again, which updates the session's notebook and
     * nothing else (the `registered` that answers is not waited for).  A
     * register in flight carries the old one: send another after it. */
    if (self->state == LINK_UP)
        send_register(self);
    else if (self->state == LINK_WAITING && self->register_seq > 0)
        self->notebook_late = 1;
}

void gs_link_cell(gs_broker_link_t *self, int busy, const char *msg_id)
{
    self->busy = busy;
    snprintf(self->msg_id, sizeof self->msg_id, "%s", msg_id);
    if (self->state == LINK_UP)
        send_cell(self);
}

int gs_link_unregister(gs_broker_link_t *self, int wait_ms)
{
    if (self->state != LINK_UP)
        return 0;
    json_t *msg = gs_msg_new(GS_MSG_UNREGISTER);
    long long seq = ++self->seq;
    json_object_set_new(msg, "seq", json_integer(seq));
    json_object_set_new(msg, "session", json_string(self->session));
    if (send_msg(self, msg) != 0)
        return 0;
    int64_t end = zclock_mono() + wait_ms;
    for (;;) {
        int64_t left = end - zclock_mono();
        if (left <= 0)
            return 0;
        zmq_pollitem_t it = {.socket = zsock_resolve(self->sock), .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, (long)left) <= 0)
            continue;
        gs_msg_type_t type;
        gs_perr_t perr;
        json_t *reply = gs_wire_recv(self->sock, NULL, &type, &perr, NULL, NULL);
        if (!reply)
            continue;
        int done = gs_msg_int(reply, "seq", -1) == seq;
        int ok = done && type == GS_MSG_OK;
        json_decref(reply);
        if (done) {
            gs_debug("unregistered session %s", self->session);
            return ok;
        }
    }
}
