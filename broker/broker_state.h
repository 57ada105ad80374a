/*
 * broker_state.h - the broker's state, shared by the files that handle
 * its events: broker.c (the loop), session_dispatch.c, control.c,
 * settings.c and settle.c.  The objects it holds know nothing of it.
 */
#ifndef GS_BROKER_STATE_H
#define GS_BROKER_STATE_H

#include <czmq.h>
#include <jansson.h>

#include "broker_options.h"
#include "conn_guard.h"
#include "eventlog.h"
#include "gpu_inventory.h"
#include "liveness.h"
#include "log_limit.h"
#include "metrics.h"
#include "park/park.h"
#include "peer.h"
#include "protocol.h"
#include "sched/scheduler.h"
#include "gpu_access.h"
#include "placement.h"
#include "sessions.h"

typedef struct gs_broker gs_broker_t;

struct gs_broker {
    gs_broker_options_t opt;
    gs_gpu_inventory_t inventory;
    zsock_t *router;
    int signal_fd;
    long long started_unix;
    unsigned long long next_client_id;
    long long next_epoch; /* the last membership number given to a joining hook */
    gs_sessions_t *sessions;
    gs_sched_t *sched;         /* grants: policy, scheduler on/off and settings live here */
    gs_park_t *park;           /* memory parking (park.h); its settings live there */
    gs_liveness_t *liveness;   /* finds dead clients (liveness.h) */
    gs_conn_guard_t *conns;    /* connections per uid (conn_guard.h) */
    long fd_limit;             /* the open-file limit in force */
    int max_conns_per_uid;     /* max_connections_per_uid */
    gs_peer_t peer;            /* credentials of the message being handled */
    gs_log_limit_t *log_limit; /* lines any user's messages cause, per uid (log_limit.h) */
    /* settings.c */
    gid_t admin_gid; /* may change settings and others' sessions; -1 = root only */
    int show_others; /* show_others: 1 names (others' user and notebook), 0 anonymous */
    int placement;   /* gs_place_policy_t: which GPU a session starts on */
    gs_placement_t *placements;
    gs_gpu_access_t gpu_access;          /* gpu_access: users' and groups' GPUs (placement) */
    gs_eventlog_t *eventlog;             /* NULL = off */
    gs_metrics_t *metrics;               /* NULL = off */
    gs_metrics_status_fn metrics_status; /* what it serves (broker.c's status object) */
    int metrics_port;
    char metrics_address[64];
    char state_path[512]; /* state_file.h: where `set --persist` saves; empty = none */
};

#endif
