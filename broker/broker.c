/*
 * broker.c - socket, event loop and message dispatch (see broker.h).
 *
 * Signals arrive through a signalfd polled with the socket, so a handler
 * never runs in the middle of a state change.
 */
#include "broker.h"
#include "admin.h"

#include <czmq.h>
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "broker_state.h"
#include "clock.h"
#include "config.h"
#include "control.h"
#include "endpoint.h"
#include "fd_limit.h"
#include "hangup.h"
#include "log.h"
#include "reply.h"
#include "sched/park_policy.h"
#include "sd_notify.h"
#include "session_dispatch.h"
#include "session_place.h"
#include "settings.h"
#include "settle.h"
#include "socket_dir.h"
#include "status.h"
#include "wire.h"

static json_t *current_status(void *arg);

static void handled_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGHUP);
    sigaddset(set, SIGUSR1);
    sigaddset(set, SIGUSR2);
}

static int open_signal_fd(void)
{
    sigset_t set;
    handled_signals(&set);
    return signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* libzmq reads a connection's bytes into an 8 KiB buffer and, by default,
 * hands each message out pointing into it: the buffer is freed only once
 * every message read into it is, so each message waiting in the broker's
 * queue kept a buffer (8 KiB and its counters) to itself.  Under the load
 * test (doc/load-test.md: 1000 clients with a request or two each in the
 * queue) the heap swung between 70 and 145 MiB with the backlog, and the
 * process kept the peak.  Copying each message out of the buffer (they are
 * a few hundred bytes) keeps the memory independent of the backlog: flat
 * at 68 MiB there.  The option is in libzmq's draft API, which Debian's
 * headers leave out; libzmq 4.3 honours it all the same, and one that
 * does not just keeps its default. */
#ifndef ZMQ_ZERO_COPY_RECV
#define ZMQ_ZERO_COPY_RECV 10
#endif
static void copy_received_messages(void)
{
    if (zmq_ctx_set(zsys_init(), ZMQ_ZERO_COPY_RECV, 0) != 0)
        gs_debug("libzmq keeps zero-copy receive: %s", zmq_strerror(zmq_errno()));
}

/* A key read once at start: the command line's --set first, then the
 * file.  *where says which, for errors ("FILE:LINE" or "command line"). */
static const gs_config_entry_t *start_key(const gs_config_t *flags, const gs_config_t *file,
                                          const char *key, char *where, size_t wlen)
{
    const gs_config_entry_t *e = gs_config_get(flags, key);
    const gs_config_t *from = flags;
    if (!e) {
        e = gs_config_get(file, key);
        from = file;
    }
    if (e && e->line > 0)
        snprintf(where, wlen, "%.400s:%d", from->path, e->line);
    else if (e)
        snprintf(where, wlen, "%.400s", from->path);
    return e;
}

/* gpu_memory: count at most this much memory on each GPU (scheduling,
 * parking, status), for a GPU part of which is used by programs outside
 * gpushare, which the broker cannot see (it never creates a context). */
static int apply_gpu_memory(gs_broker_t *self, const gs_config_t *flags, const gs_config_t *file,
                            char *err, size_t errlen)
{
    char where[420];
    const gs_config_entry_t *e = start_key(flags, file, "gpu_memory", where, sizeof where);
    if (!e || !strcmp(e->value, "auto"))
        return 0;
    json_t *v = gs_config_value_json(e->value);
    uint64_t limit = 0;
    int bad = gs_park_policy_parse_bytes(v, &limit) != 0 || limit == 0;
    json_decref(v);
    if (bad) {
        snprintf(err, errlen,
                 "%s: gpu_memory: must be bytes (a number, or with a K/M/G/T suffix) or "
                 "\"auto\", not \"%.60s\"",
                 where, e->value);
        return -1;
    }
    for (int i = 0; i < self->inventory.count; i++) {
        gs_gpu_t *g = &self->inventory.gpus[i];
        if (g->memory_total > limit) {
            gs_info("GPU %d: counting %.2f GiB of its %.2f GiB (gpu_memory)", i,
                    limit / 1073741824.0, g->memory_total / 1073741824.0);
            g->memory_total = limit;
        }
    }
    return 0;
}

/* The keys read once, before the socket is bound: endpoint, heartbeat_ms,
 * socket_group, state_file.  A dedicated flag (--endpoint, --socket-group)
 * wins over --set, which wins over the file; every value is checked, so
 * that none is accepted and then ignored. */
static int read_start_keys(gs_broker_t *self, const gs_config_t *flags, const gs_config_t *file,
                           char *err, size_t errlen)
{
    char where[420];
    const gs_config_entry_t *e;
    if ((e = start_key(flags, file, "endpoint", where, sizeof where))) {
        char ep[sizeof self->opt.endpoint], why[256];
        if (gs_endpoint_normalise(e->value, ep, sizeof ep, why, sizeof why) != 0) {
            snprintf(err, errlen, "%s: endpoint: %s", where, why);
            return -1;
        }
        if (!self->opt.endpoint[0]) /* -e wins */
            memcpy(self->opt.endpoint, ep, sizeof ep);
    }
    if ((e = start_key(flags, file, "heartbeat_ms", where, sizeof where))) {
        json_t *v = gs_config_value_json(e->value);
        json_int_t ms = json_is_integer(v) ? json_integer_value(v) : -1;
        json_decref(v);
        if (ms < 10 || ms > 600000) {
            snprintf(err, errlen,
                     "%s: heartbeat_ms: must be a whole number from 10 to 600000, "
                     "not \"%.60s\"",
                     where, e->value);
            return -1;
        }
        if (!self->opt.heartbeat_ms)
            self->opt.heartbeat_ms = (int)ms;
    }
    /* Only the system service's socket has a group: a per-user broker's
     * directory is its user's alone.  The packaged /etc/gpushare/broker.conf
     * names one, and a per-user broker reads that file too, so there it is
     * only a note; on the command line it is an error. */
    if (!self->opt.system && self->opt.socket_group != (gid_t)-1) {
        snprintf(err, errlen,
                 "--socket-group: only the system service (--system) has a socket "
                 "group");
        return -1;
    }
    if ((e = start_key(flags, file, "socket_group", where, sizeof where))) {
        struct group *gr = e->value[0] ? getgrnam(e->value) : NULL;
        if (!self->opt.system && e == gs_config_get(flags, "socket_group")) {
            snprintf(err, errlen,
                     "%s: socket_group: only the system service (--system) has a "
                     "socket group",
                     where);
            return -1;
        }
        if (!self->opt.system)
            gs_info("%s: socket_group applies to the system service only; this broker's socket "
                    "is its user's alone",
                    where);
        else if (!gr) {
            snprintf(err, errlen, "%s: socket_group: no group named \"%.60s\"", where, e->value);
            return -1;
        } else if (self->opt.socket_group == (gid_t)-1) /* --socket-group wins */
            self->opt.socket_group = gr->gr_gid;
    }
    if ((e = start_key(flags, file, "state_file", where, sizeof where))) {
        if (e->value[0] && e->value[0] != '/') {
            snprintf(err, errlen, "%s: state_file: must be an absolute path, not \"%.60s\"", where,
                     e->value);
            return -1;
        }
        snprintf(self->state_path, sizeof self->state_path, "%s", e->value);
    } else if (self->opt.system) {
        snprintf(self->state_path, sizeof self->state_path, "%s", GS_SYSTEM_STATE_FILE);
    }
    return 0;
}

gs_broker_t *gs_broker_new(const gs_broker_options_t *opt, char *err, size_t errlen)
{
    gs_broker_t *self = calloc(1, sizeof *self);
    if (!self) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* Block the signals the loop reads from a signalfd before any thread
     * exists: libcuda's cuInit, ZeroMQ and the park workers start threads,
     * which inherit this mask; a signal delivered to one of them would
     * otherwise kill the broker without its clean shutdown (seen on the
     * H200: SIGTERM ended the broker before it unparked anyone). */
    sigset_t blocked;
    handled_signals(&blocked);
    if (pthread_sigmask(SIG_BLOCK, &blocked, NULL) != 0) {
        snprintf(err, errlen, "cannot block signals");
        free(self);
        return NULL;
    }
    self->opt = *opt;
    /* A copy of the flags, which a reload applies again after the file:
     * flags win over the file on SIGHUP too. */
    self->opt.overrides.entries = NULL;
    self->opt.overrides.count = 0;
    for (size_t i = 0; i < opt->overrides.count; i++) {
        const gs_config_entry_t *o = &opt->overrides.entries[i];
        if (gs_config_add(&self->opt.overrides, o->key, o->value, o->line, err, errlen) != 0) {
            gs_config_free(&self->opt.overrides);
            free(self);
            return NULL;
        }
    }
    self->admin_gid = (gid_t)-1;
    self->show_others = 1;
    self->placement = GS_PLACE_SPREAD;
    self->placements = gs_placement_new();
    self->max_conns_per_uid = GS_CONN_DEFAULT_PER_UID;
    /* Before any socket: each connection is a descriptor (conn_guard.h). */
    self->fd_limit = gs_fd_limit_raise();
    self->metrics_status = current_status;
    /* Sessions' ids are their names for the broker's own user (sessions.h). */
    self->sessions = gs_sessions_new(geteuid());
    /* Lines any user's messages cause, one each: 50 at once, then 5 a second. */
    self->log_limit = gs_log_limit_new(50, 5.0);
    self->started_unix = (long long)time(NULL);

    /* The configuration file: the start-only keys now, the rest once the
     * scheduler exists.  Flags win over the file. */
    gs_config_t file = {{0}, NULL, 0}, state = {{0}, NULL, 0};
    int explicit_config = self->opt.config_path[0] != '\0';
    if (!explicit_config)
        snprintf(self->opt.config_path, sizeof self->opt.config_path, "%s", GS_DEFAULT_CONFIG);
    if (gs_config_load(self->opt.config_path, !explicit_config, &file, err, errlen) != 0)
        goto fail;
    if (read_start_keys(self, &opt->overrides, &file, err, errlen) != 0)
        goto fail;
    if (!self->opt.heartbeat_ms)
        self->opt.heartbeat_ms = 1000;
    if (!self->opt.endpoint[0] &&
        gs_endpoint_for_broker(opt->system, self->opt.endpoint, sizeof self->opt.endpoint, err,
                               errlen) != 0)
        goto fail;
    const char *path = gs_endpoint_ipc_path(self->opt.endpoint);
    /* self->opt, not opt: the file may have named the socket group. */
    if (path &&
        gs_socket_dir_prepare(path, self->opt.system, self->opt.socket_group, err, errlen) != 0)
        goto fail;

    gs_gpu_inventory_load(&self->inventory);
    if (apply_gpu_memory(self, &opt->overrides, &file, err, errlen) != 0)
        goto fail;
    uint64_t memory[GS_MAX_GPUS];
    for (int i = 0; i < self->inventory.count; i++)
        memory[i] = self->inventory.gpus[i].memory_total;
    self->sched = gs_sched_new(self->inventory.count, memory);
    if (self->sched)
        self->park = gs_park_new(self->sched, self->sessions, &self->inventory, self->opt.endpoint,
                                 gs_socket_mode(self->opt.system, self->opt.socket_group),
                                 self->opt.system ? self->opt.socket_group : (gid_t)-1);
    if (!self->sessions || !self->sched || !self->park) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    gs_park_set_move_hooks(self->park, &(gs_park_move_hooks_t){.allowed = gs_session_place_may_move,
                                                               .moved = gs_session_place_moved,
                                                               .arg = self});
    if (self->state_path[0] && gs_state_file_load(self->state_path, &state, err, errlen) != 0)
        goto fail;
    if (gs_settings_apply_files(self, &file, &state, &opt->overrides, 0, err, errlen) != 0)
        goto fail;
    gs_config_free(&file);
    gs_config_free(&state);
    if (!explicit_config && access(self->opt.config_path, F_OK) != 0)
        self->opt.config_path[0] = '\0'; /* nothing to reload */

    /* czmq's own SIGINT handler would only set a flag we never read. */
    zsys_handler_set(NULL);
    gs_hangup_init();
    self->signal_fd = open_signal_fd();
    if (self->signal_fd < 0) {
        snprintf(err, errlen, "cannot set up signal handling: %s", strerror(errno));
        goto fail;
    }
    copy_received_messages(); /* before the first socket, which copies the setting */
    self->router = zsock_new(ZMQ_ROUTER);
    if (!self->router) {
        snprintf(err, errlen, "cannot create a ZeroMQ socket");
        goto fail;
    }
    zsock_set_router_mandatory(self->router, 1); /* a vanished peer is an error, not a hang */
    zsock_set_sndtimeo(self->router, 0);
    zsock_set_linger(self->router, 0);
    /* libzmq drops a connection whose frame announces more than this before
     * reading it, instead of buffering it whole (a 1.5 GB frame once did). */
    zsock_set_maxmsgsize(self->router, GS_PROTO_MAX_SIZE);
    if (zsock_bind(self->router, "%s", self->opt.endpoint) < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", self->opt.endpoint,
                 zmq_strerror(zmq_errno()));
        goto fail;
    }
    /* The system socket: the group's or everyone's (gs_socket_mode). */
    if (path && self->opt.system) {
        gid_t g = self->opt.socket_group;
        if ((g != (gid_t)-1 && chown(path, (uid_t)-1, g) != 0) ||
            chmod(path, gs_socket_mode(1, g)) != 0)
            gs_warn("cannot set the permissions of %s: %s", path, strerror(errno));
    }
    self->conns = gs_conn_guard_new(self->router, path, self->fd_limit, err, errlen);
    if (!self->conns)
        goto fail;
    gs_conn_guard_set_per_uid(self->conns, self->max_conns_per_uid);
    self->liveness = gs_liveness_new(self->opt.heartbeat_ms, gs_clock_now_us(), err, errlen);
    if (!self->liveness)
        goto fail;
    return self;
fail:
    gs_config_free(&file);
    gs_config_free(&state);
    gs_broker_destroy(&self);
    return NULL;
}

void gs_broker_destroy(gs_broker_t **self_p)
{
    gs_broker_t *self = *self_p;
    if (!self)
        return;
    gs_park_destroy(&self->park); /* brings parked sessions back first */
    gs_liveness_destroy(&self->liveness);
    gs_conn_guard_destroy(&self->conns);
    zsock_destroy(&self->router);
    gs_sessions_destroy(&self->sessions);
    gs_placement_destroy(&self->placements);
    gs_log_limit_destroy(&self->log_limit);
    gs_eventlog_close(&self->eventlog);
    gs_metrics_destroy(&self->metrics);
    gs_sched_destroy(&self->sched);
    gs_config_free(&self->opt.overrides);
    const char *path = gs_endpoint_ipc_path(self->opt.endpoint);
    if (path && self->signal_fd > 0)
        unlink(path); /* only a broker that got as far as binding owns it */
    if (self->signal_fd > 0)
        close(self->signal_fd);
    free(self);
    *self_p = NULL;
}

static void on_hello(gs_broker_t *self, zframe_t *peer, const json_t *req)
{
    char id[32];
    snprintf(id, sizeof id, "c%llu", ++self->next_client_id);
    json_t *w = gs_msg_new(GS_MSG_WELCOME);
    json_object_set_new(w, "client_id", json_string(id));
    json_object_set_new(w, "broker_version", json_string(PACKAGE_VERSION));
    const gs_sched_config_t *cfg = gs_sched_config(self->sched);
    json_object_set_new(w, "policy", json_string(gs_sched_policy_name(cfg->policy)));
    json_object_set_new(w, "scheduler", json_string(cfg->enabled ? "on" : "off"));
    json_object_set_new(w, "heartbeat_ms", json_integer(self->opt.heartbeat_ms));
    json_object_set_new(w, "simulated", json_boolean(self->inventory.simulated));
    json_t *devices = gs_session_place_hello(self, req);
    if (devices)
        json_object_set_new(w, "devices", devices);
    gs_reply_echo_seq(w, req);
    gs_debug("hello from %s pid %lld", gs_msg_str(req, "role", "?"), gs_msg_int(req, "pid", 0));
    gs_reply_send(self->router, peer, w);
}

/* The status object (status.h) as `gpushare status --json` prints it. */
static json_t *status(gs_broker_t *self)
{
    int64_t now = gs_clock_now_us();
    gs_status_input_t in = {.sched = self->sched,
                            .now_us = now,
                            .endpoint = self->opt.endpoint,
                            .inventory = &self->inventory,
                            .started_unix = self->started_unix};
    in.sessions = self->sessions;
    in.placements = self->placements;
    json_t *st = gs_status_build(&in);
    gs_park_status_add(self->park, st, now);
    json_object_set_new(st, "connections", gs_conn_guard_status(self->conns));
    return st;
}

/* What the metrics server serves (metrics.h), on this thread. */
static json_t *current_status(void *arg)
{
    gs_broker_t *self = arg;
    return status(self);
}

static void on_status(gs_broker_t *self, zframe_t *peer, const json_t *req)
{
    json_t *r = gs_msg_new(GS_MSG_STATUS_REPLY), *st = status(self);
    /* Whether a waiting cell and `gpushare status` name other users'
     * notebooks (admins see everything). */
    json_object_set_new(json_object_get(st, "config"), "show_others",
                        json_string(self->show_others ? "names" : "anonymous"));
    json_object_set_new(json_object_get(st, "config"), "placement",
                        json_string(gs_session_place_policy_name(self)));
    if (!self->show_others &&
        !(self->peer.valid && gs_admin_is_admin(self->peer.uid, self->admin_gid)))
        gs_status_anonymize(st, self->peer.valid ? self->peer.uid : (uid_t)-1);
    json_object_set_new(r, "status", st);
    gs_reply_echo_seq(r, req);
    gs_reply_send(self->router, peer, r);
}

/* The monitor's events: connections counted, and ended ones for liveness. */
static void read_connection_events(gs_broker_t *self)
{
    int64_t now = gs_clock_now_us();
    if (gs_conn_guard_on_monitor(self->conns, now) > 0)
        gs_liveness_on_disconnect(self->liveness, now);
}

/* 1 when the message is refused before anyone reads it: a routing id
 * too long to key a client by, or a hello on a connection over its uid's
 * limit (conn_guard.h). */
static int refused(gs_broker_t *self, zframe_t *peer, gs_msg_type_t type, const json_t *msg)
{
    char text[300];
    if (zframe_size(peer) > GS_MAX_ROUTING_ID) {
        snprintf(text, sizeof text,
                 "routing id of %zu bytes: the broker accepts at most %d (leave ZMQ_ROUTING_ID "
                 "unset)",
                 zframe_size(peer), GS_MAX_ROUTING_ID);
        gs_reply_error(self->router, peer, msg, "bad_value", text);
        return 1;
    }
    if (type != GS_MSG_HELLO || !self->peer.valid)
        return 0;
    read_connection_events(self); /* its ACCEPTED is in the queue by now */
    if (!gs_conn_guard_refusing(self->conns, self->peer.uid, text, sizeof text))
        return 0;
    gs_reply_error(self->router, peer, msg, "too_many_connections", text);
    return 1;
}

static void handle_message(gs_broker_t *self)
{
    zframe_t *peer = NULL;
    gs_msg_type_t type;
    gs_perr_t perr;
    json_t *rejected = NULL;
    json_t *msg = gs_wire_recv(self->router, &peer, &type, &perr, &rejected, &self->peer);
    if (!msg) {
        if (peer && perr.code != GS_PERR_NONE) {
            /* One line per bad message, as many as a user sends: limited
             * per uid (log_limit.h); the sender is answered either way. */
            unsigned long held = 0;
            if (!self->peer.valid ||
                gs_log_limit_allow(self->log_limit, self->peer.uid, gs_clock_now_us(), &held)) {
                if (held)
                    gs_info("rejected a message: %s (%lu more lines from uid %u not logged)",
                            perr.text, held, (unsigned)self->peer.uid);
                else
                    gs_info("rejected a message: %s", perr.text);
            }
            gs_reply_error(self->router, peer, rejected, gs_perr_code_name(perr.code), perr.text);
        }
        json_decref(rejected);
        zframe_destroy(&peer);
        return;
    }
    if (refused(self, peer, type, msg)) {
        json_decref(msg);
        zframe_destroy(&peer);
        return;
    }
    if (gs_session_dispatch(self, peer, type, msg)) {
        json_decref(msg);
        zframe_destroy(&peer);
        return;
    }
    switch (type) {
    case GS_MSG_HELLO:
        on_hello(self, peer, msg);
        break;
    case GS_MSG_STATUS:
        on_status(self, peer, msg);
        break;
    case GS_MSG_SET:
        gs_control_on_set(self, peer, msg);
        break;
    case GS_MSG_WELCOME:
    case GS_MSG_REGISTERED:
    case GS_MSG_GRANT:
    case GS_MSG_REVOKE:
    case GS_MSG_ROOM:
    case GS_MSG_SWAP_OUT:
    case GS_MSG_SWAP_IN:
    case GS_MSG_STATUS_REPLY:
    case GS_MSG_OK:
    case GS_MSG_ERROR: {
        char text[96];
        snprintf(text, sizeof text, "\"%s\" is sent by the broker, not to it",
                 gs_msg_type_name(type));
        gs_reply_error(self->router, peer, msg, "wrong_direction", text);
        break;
    }
    default: {
        char text[96];
        snprintf(text, sizeof text, "\"%s\" is not implemented by this broker yet",
                 gs_msg_type_name(type));
        gs_reply_error(self->router, peer, msg, "not_implemented", text);
        break;
    }
    }
    json_decref(msg);
    zframe_destroy(&peer);
}

/* Returns 1 to keep running, 0 to stop. */
static int handle_signal(gs_broker_t *self)
{
    struct signalfd_siginfo si;
    while (read(self->signal_fd, &si, sizeof si) == (ssize_t)sizeof si) {
        switch (si.ssi_signo) {
        case SIGTERM:
        case SIGINT:
            gs_info("signal %u: shutting down; clients fall back to running ungated", si.ssi_signo);
            return 0;
        case SIGUSR1:
        case SIGUSR2: {
            char err[200];
            json_t *on = json_string(si.ssi_signo == SIGUSR1 ? "on" : "off");
            if (gs_sched_set(self->sched, "scheduler", on, err, sizeof err) != 0)
                gs_error("internal: %s", err);
            json_decref(on);
            gs_info(si.ssi_signo == SIGUSR1
                        ? "scheduler on"
                        : "scheduler off: every session is granted and only monitored");
            break;
        }
        case SIGHUP:
            if (gs_hangup_terminal_gone()) {
                gs_info("the terminal it ran in closed: shutting down; clients fall back to "
                        "running ungated");
                return 0;
            }
            gs_settings_reload(self);
            break;
        default:
            break;
        }
    }
    return 1;
}

static void announce(const gs_broker_t *self)
{
    const gs_gpu_inventory_t *inv = &self->inventory;
    /* Where it listens is said at every level: it is what a person who
     * started it needs next (clients, GPUSHARE_BROKER). */
    if (gs_log_enabled(GS_LOG_INFO))
        gs_log(GS_LOG_INFO, "gpushare-broker %s listening on %s", PACKAGE_VERSION,
               self->opt.endpoint);
    else
        fprintf(stderr, "gpushare-broker[%d]: listening on %s (-v says more)\n", (int)getpid(),
                self->opt.endpoint);
    if (inv->simulated)
        gs_warn("SIMULATED GPU: no NVIDIA driver is in use; libcuda.so.1 is the test suite's "
                "simulated driver. Nothing runs on real hardware.");
    if (inv->count == 0)
        gs_warn("no GPUs: %s; clients run ungated", inv->problem);
    for (int i = 0; i < inv->count; i++)
        gs_log(GS_LOG_INFO, "GPU %d: %s %s, %.1f GiB%s", inv->gpus[i].index, inv->gpus[i].name,
               inv->gpus[i].uuid, inv->gpus[i].memory_total / 1073741824.0,
               inv->simulated ? " (simulated)" : "");
}

/* The scheduler's next deadline and the liveness checks bound the wait. */
static long poll_timeout_ms(const gs_broker_t *self)
{
    int64_t due = gs_sched_next_deadline(self->sched);
    int64_t live = gs_liveness_next_deadline(self->liveness);
    if (live < due)
        due = live;
    int64_t park = gs_park_next_deadline(self->park);
    if (park < due)
        due = park;
    int64_t cut = gs_conn_guard_next_deadline(self->conns);
    if (cut < due)
        due = cut;
    long metrics = self->metrics ? gs_metrics_timeout_ms(self->metrics) : -1;
    if (due == GS_SCHED_NEVER)
        return metrics;
    int64_t left = due - gs_clock_now_us();
    long ms = left <= 0 ? 0 : (long)((left + 999) / 1000);
    return metrics >= 0 && metrics < ms ? metrics : ms;
}

/* Dead clients leave, then sessions whose launcher or every process is
 * gone are dealt with; each changes the tables, so look again while a
 * batch came back full. */
static void drop_dead_clients(gs_broker_t *self, int64_t now, int check_silence)
{
    enum { BATCH = 64 };
    gs_liveness_dead_t dead[BATCH];
    int n;
    do {
        n = gs_liveness_find_dead(self->liveness, self->sessions, now, check_silence, dead, BATCH);
        for (int i = 0; i < n; i++)
            gs_settle_client_gone(self, dead[i].key,
                                  dead[i].exited ? GS_GONE_EXITED : GS_GONE_DROPPED, dead[i].why);
    } while (n == BATCH);
    gs_liveness_orphan_t orphan[BATCH / 4];
    do {
        n = gs_liveness_find_orphans(self->liveness, self->sessions, orphan, BATCH / 4);
        for (int i = 0; i < n; i++) {
            if (!orphan[i].ended) {
                gs_settle_launcher_gone(self, orphan[i].id, orphan[i].why);
                continue;
            }
            gs_info("session %s ended: %s", orphan[i].id, orphan[i].why);
            gs_eventlog_write(
                self->eventlog, "session_gone",
                json_pack("{s:s, s:s}", "session", orphan[i].id, "why", orphan[i].why));
            gs_settle_end_session(self, orphan[i].id);
        }
    } while (n == BATCH / 4);
}

static void run_timers(gs_broker_t *self)
{
    int64_t now = gs_clock_now_us();
    if (now >= gs_sched_next_deadline(self->sched)) {
        gs_sched_tick(self->sched, now);
        gs_settle(self);
    } else if (now >= gs_park_next_deadline(self->park)) {
        gs_settle(self); /* parking's own timers (idle thresholds, retries) */
    }
    gs_conn_guard_tick(self->conns, now);
    int check_silence;
    if (gs_liveness_due(self->liveness, now, &check_silence))
        drop_dead_clients(self, now, check_silence);
}

int gs_broker_run(gs_broker_t *self)
{
    announce(self);
    gs_sd_notify("READY=1\nSTATUS=serving");
    enum { FIXED = 4, METRICS = 1, MAX_ITEMS = FIXED + METRICS + GS_PARK_MAX_POLL_ITEMS };
    int park_fd = gs_park_fd(self->park);
    zmq_pollitem_t items[MAX_ITEMS] = {
        {zsock_resolve(self->router), 0, ZMQ_POLLIN, 0},
        {NULL, self->signal_fd, ZMQ_POLLIN, 0},
        {gs_conn_guard_socket(self->conns), 0, ZMQ_POLLIN, 0},
        {NULL, park_fd, park_fd >= 0 ? ZMQ_POLLIN : 0, 0}, /* park jobs finished */
    };
    for (;;) {
        int n = FIXED;
        if (self->metrics) /* one descriptor: libmicrohttpd's epoll set */
            items[n++] = (zmq_pollitem_t){NULL, gs_metrics_fd(self->metrics), ZMQ_POLLIN, 0};
        int park_first = n;
        n += gs_park_poll_items(self->park, items + n, MAX_ITEMS - n);
        int rc = zmq_poll(items, n, poll_timeout_ms(self));
        if (rc < 0) {
            if (zmq_errno() == EINTR)
                continue;
            gs_error("poll failed: %s", zmq_strerror(zmq_errno()));
            return 1;
        }
        if (items[1].revents & ZMQ_POLLIN && !handle_signal(self))
            break;
        if (items[2].revents & ZMQ_POLLIN)
            read_connection_events(self);
        if (items[3].revents & ZMQ_POLLIN) {
            gs_park_on_jobs(self->park, gs_clock_now_us());
            gs_settle(self);
        }
        /* Drain what is queued, bounded so signals stay responsive. */
        for (int i = 0; i < 1000 && (zsock_events(self->router) & ZMQ_POLLIN); i++)
            handle_message(self);
        /* Always: it returns at once when nothing is ready, and it is also
         * due without an event (timeouts, data it has already read).  (A
         * signal may have replaced the server since the poll: the new one
         * just finds nothing to do.) */
        if (self->metrics)
            gs_metrics_run(self->metrics);
        int park_events = 0;
        for (int i = park_first; i < n; i++)
            park_events |= items[i].revents != 0;
        /* Also without events: the pool socket's silent connections are
         * dropped and its waits end on time (gs_park_next_deadline). */
        gs_park_handle_items(self->park, items + park_first, n - park_first, gs_clock_now_us());
        if (park_events)
            gs_settle(self); /* a pool that grew may let a park start */
        run_timers(self);
    }
    gs_sd_notify("STOPPING=1");
    return 0;
}
