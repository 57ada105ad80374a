/*
 * broker_internal.h - the broker's state, shared by its dispatch files.
 */
#ifndef GS_BROKER_INTERNAL_H
#define GS_BROKER_INTERNAL_H

#include <czmq.h>
#include <jansson.h>

#include "broker.h"
#include "eventlog.h"
#include "metrics.h"
#include "gpu_inventory.h"
#include "park/park.h"
#include "peer.h"
#include "protocol.h"
#include "sched/scheduler.h"
#include "sessions.h"

struct gs_broker {
    gs_broker_options_t opt;
    gs_gpu_inventory_t inventory;
    zsock_t *router;
    int signal_fd;
    long long started_unix;
    unsigned long long next_client_id;
    gs_sessions_t *sessions;
    gs_sched_t *sched; /* grants: policy, scheduler on/off and settings live here */
    gs_park_t *park;   /* memory parking (park.h); its settings live there */
    gs_peer_t peer;    /* credentials of the message being handled (broker_recv.c) */
    /* liveness (liveness.c) */
    void *monitor;         /* PAIR socket receiving the ROUTER's disconnect events */
    int64_t next_sweep_us; /* periodic check of every client */
    int64_t recheck_us[4]; /* checks soon after a disconnect, 0 = unused */
    /* settings.c */
    gid_t admin_gid;         /* may change settings and others' sessions; -1 = root only */
    gs_eventlog_t *eventlog; /* NULL = off */
    gs_metrics_t *metrics;   /* NULL = off */
    int metrics_port;
    char metrics_address[64];
    int metrics_dirty;
};

/* Settings (settings.c): apply a {key: value} batch from `set` (from_set:
 * only run-time keys) or a reload; scheduling keys all-or-nothing.  0, or
 * -1 with the first problem in err. */
int gs_broker_apply(gs_broker_t *self, const json_t *settings, int from_set, char *err,
                    size_t errlen);
/* Apply a configuration file's entries one by one (errors name FILE:LINE). */
int gs_broker_apply_config(gs_broker_t *self, const gs_config_t *cfg, char *err, size_t errlen);
/* The file's entries then the overrides, as one {key: value} object. */
json_t *gs_broker_config_settings(const gs_config_t *cfg, const gs_config_t *overrides);
/* SIGHUP: re-read the configuration file; on error keep the running one. */
int gs_broker_reload(gs_broker_t *self);

/* The status object (status.h) as `gpushare status --json` prints it. */
json_t *gs_broker_status(gs_broker_t *self);

/* `set` from the CLI (control.c): admins only. */
void gs_broker_on_set(gs_broker_t *self, zframe_t *peer, const json_t *msg);

/* Receive one request (broker_recv.c): gs_wire_recv's contract, and the
 * sender's credentials in self->peer (valid = 0 without them). */
json_t *gs_broker_recv(gs_broker_t *self, zframe_t **identity, gs_msg_type_t *type, gs_perr_t *err,
                       json_t **rejected);

void gs_broker_reply(gs_broker_t *self, zframe_t *peer, json_t *msg);
void gs_broker_reply_error(gs_broker_t *self, zframe_t *peer, const json_t *req, const char *code,
                           const char *text);
void gs_broker_echo_seq(json_t *out, const json_t *req);

/* Session, cell and grant messages (session_dispatch.c).  Returns 1 when
 * the message was one of those and has been handled. */
int gs_broker_dispatch_session(gs_broker_t *self, zframe_t *peer, gs_msg_type_t type,
                               const json_t *msg);

/* Index of the GPU with this UUID, or -1. */
int gs_broker_gpu_index(const gs_broker_t *self, const char *uuid);

/* CLOCK_MONOTONIC in microseconds: the scheduler's clock. */
int64_t gs_broker_now_us(void);

/* Send the scheduler's pending grants and revokes (session_dispatch.c);
 * call after every scheduler event or tick. */
void gs_broker_sched_flush(gs_broker_t *self);

/* A client is gone (disconnected, dead, silent, exited): its grants and
 * memory go back to the scheduler at once and it leaves the tables. */
void gs_broker_client_gone(gs_broker_t *self, const char *key, const char *why);

/* Liveness (liveness.c): ZeroMQ disconnect events, heartbeats (a client
 * silent for 3 heartbeat intervals is dead) and whether the peer's process
 * still exists (checked every heartbeat interval and right after each
 * disconnect, so a killed process' grant is reclaimed within ~150 ms). */
int gs_liveness_start(gs_broker_t *self, char *err, size_t errlen);
void gs_liveness_stop(gs_broker_t *self);
void gs_liveness_on_monitor(gs_broker_t *self);
void gs_liveness_check(gs_broker_t *self, int64_t now_us);
int64_t gs_liveness_next_deadline(const gs_broker_t *self);

#endif
