/*
 * scheduler_state.h - the scheduler's tables (sessions, clients, shares,
 * the queue of actions) and the per-session state every other file of
 * broker/sched reads: lookups, running totals, lists of holders and
 * waiters, the boost's GPU time.  The bottom of the library above its value
 * types: it calls nothing of the scheduler; policies, holds and the public
 * API (scheduler.c) call down into it.
 *
 * Tables are plain arrays searched linearly: a machine has tens of
 * sessions, not thousands; what every decision needs per session is kept
 * as a running total instead.
 */
#ifndef GS_SCHEDULER_STATE_H
#define GS_SCHEDULER_STATE_H

#include "scheduler_types.h"

typedef struct sched_session sched_session_t;

#define SCHED_GAPS 5 /* idle gaps remembered per session and GPU */

typedef struct {
    int wants;         /* acquire not yet answered by a grant */
    uint64_t grant_id; /* grant held, 0 = none */
    int revoked;       /* revoke sent for grant_id, release awaited */
    uint64_t used_bytes;
} client_gpu_t;

typedef struct {
    char id[GS_SCHED_ID_MAX];
    sched_session_t *session;
    client_gpu_t g[GS_SCHED_MAX_GPUS];
} sched_client_t;

typedef struct {
    int64_t start, end;
} interval_t;

/* A session on one GPU. */
typedef struct {
    int holding;          /* holds the GPU: its clients are granted on asking */
    int nheld;            /* client grants outstanding */
    const char *revoking; /* reason of the revoke in progress, NULL = none */
    int64_t hold_start;   /* this hold began */
    int64_t deadline;     /* its slice ends (GS_SCHED_NEVER: no slice) */
    int64_t quantum;      /* length of the slice given (0: none) */
    int waiting;          /* in the queue for the GPU */
    uint64_t queue_seq;   /* arrival order in the queue */
    int64_t wait_start;
    int64_t active_since; /* start of this busy period (waiting or holding) */
    int64_t gpu_mark;     /* gpu_time when the cell or busy period began */
    int used;             /* ever held, asked for or had memory here */
    /* accounting */
    int64_t gpu_time, wait_time;
    uint64_t grants, revokes;
    /* burst */
    int64_t tau;       /* last quota given, 0 = none yet */
    int64_t p90, last; /* latest burst report of any of its clients */
    int stats_new;     /* a report arrived since the last quota */
    interval_t *hist;  /* past holds, oldest first, pruned to the window */
    int nhist, caphist;
    /* adaptive boost */
    int64_t boost_left;  /* GPU time of boost left for the running cell */
    int boosting;        /* holds the GPU under the boost (with other boosted cells only) */
    int64_t boost_start; /* boost_left was counted until then */
    int boost_share;     /* boosted cells holding the GPU together since (>= 1) */
    /* parking */
    int demand; /* queued for its parked cell, without an acquire */
    /* switching (scheduler_turns.c): a turn is its time on the GPU under
     * adaptive, which outlives the idle releases of its running cell */
    gs_sched_move_t move;     /* gs_sched_set_move; rates 0: cannot move */
    int64_t turn_start;       /* 0: no turn */
    int64_t turn_slice;       /* the adaptive slice it was given then */
    uint64_t turns;           /* turns begun (the event log's grants say which) */
    int64_t released_at;      /* gave the GPU back by itself (idle), 0: no */
    int64_t gaps[SCHED_GAPS]; /* its last idle gaps, release to the next acquire */
    int ngaps, gap_next;      /* gaps kept, where the next one goes */
    int gaps_stale;           /* they are the previous cell's (sched_turns_gap_close) */
    int gap_switched;         /* switched out during the gap under way (sched_turns_idle_gap) */
    unsigned char gap_was_switched[SCHED_GAPS]; /* per kept gap */
    int64_t phases[SCHED_GAPS]; /* its last GPU phases: a hold to its idle release */
    int nphases, phase_next;
    int64_t hint; /* idle_release_us its grants carry */
    /* Running totals over its clients, kept by sched_state_set_wants and
     * sched_state_set_used: every decision asks for them, for every session, and
     * summing the client table each time made an event cost sessions x
     * clients (the load test: 1000 clients, 200 sessions). */
    uint64_t footprint; /* sum of its clients' used_bytes here */
    int nwants;         /* its clients whose acquire here is not granted yet */
} sess_gpu_t;

struct sched_session {
    char id[GS_SCHED_ID_MAX];
    int registered;
    int cell_busy;
    int64_t cell_start;
    int64_t cell_end;               /* the last cell ended (0: none yet) */
    int64_t thinks[SCHED_GAPS];     /* its last pauses between cells, end to next start */
    int nthinks, think_next;        /* pauses kept, where the next one goes */
    int64_t last_active;            /* cell start/end, acquire, grant, release */
    gs_sched_residency_t residency; /* parking: only RESIDENT sessions are granted */
    int nclients;
    unsigned gang; /* GPUs it holds together (scheduler_gang.c); 0: one GPU */
    sess_gpu_t g[GS_SCHED_MAX_GPUS];
};

typedef struct {
    char session[GS_SCHED_ID_MAX];
    double request, limit; /* < 0: the default */
} share_t;

struct gs_sched {
    gs_sched_config_t cfg;
    int ngpus;
    uint64_t mem_total[GS_SCHED_MAX_GPUS];
    int64_t wake[GS_SCHED_MAX_GPUS]; /* per GPU, from the last decision */
    sched_session_t **sessions;
    int nsessions, capsessions;
    sched_client_t **clients;
    int nclients, capclients;
    share_t *shares;
    int nshares, capshares;
    gs_sched_action_t *acts;
    int nacts, headacts, capacts;
    uint64_t next_grant_id, next_queue_seq;
    int64_t last_now;
    int dirty;                        /* settings changed: decide again at the next tick */
    int contended[GS_SCHED_MAX_GPUS]; /* a switch was wanted at the last decision */
};

/* Free every table (not s itself): gs_sched_destroy. */
void sched_state_free(gs_sched_t *s);

/* Sessions.  find: NULL when unknown; get: found or created (resident, no
 * deadlines); remove: out of the table and freed. */
sched_session_t *sched_state_session_find(const gs_sched_t *s, const char *id);
sched_session_t *sched_state_session_get(gs_sched_t *s, const char *id);
void sched_state_session_remove(gs_sched_t *s, sched_session_t *ss);

/* Clients.  add: a new client of no session yet (owned by the table);
 * remove: out of the table and freed. */
sched_client_t *sched_state_client_find(const gs_sched_t *s, const char *id);
sched_client_t *sched_state_client_add(gs_sched_t *s, const char *id);
void sched_state_client_remove(gs_sched_t *s, sched_client_t *c);

/* The only writers of a client's wants and used_bytes: they keep its
 * session's running totals (sess_gpu_t nwants, footprint) in step. */
void sched_state_set_wants(sched_client_t *c, int gpu, int on);
void sched_state_set_used(sched_client_t *c, int gpu, uint64_t bytes);

uint64_t sched_state_footprint(const gs_sched_t *s, const sched_session_t *ss, int gpu);
/* One of its clients asked for the GPU and was not granted yet. */
int sched_state_wants(const gs_sched_t *s, const sched_session_t *ss, int gpu);
/* May be granted now: resident, and one of its clients asked. */
int sched_state_grantable(const gs_sched_t *s, const sched_session_t *ss, int gpu);
/* Its shares: its own (share.<session>.*) or the defaults. */
void sched_state_shares(const gs_sched_t *s, const char *session, double *request, double *limit);

/* A past hold, kept for the burst share window; the GPU time it held
 * within the window that ends at now. */
void sched_state_hist_add(gs_sched_t *s, sess_gpu_t *g, int64_t start, int64_t end);
int64_t sched_state_window_used(const sess_gpu_t *g, int64_t now, int64_t window);

/* Sessions holding (oldest hold first) or waiting (arrival order) on a
 * GPU; malloc'd array of *n, the caller frees it. */
sched_session_t **sched_state_list(const gs_sched_t *s, int gpu, int holders, int *n);

/* The boost is GPU time: holding it with k boosted cells uses 1/k. */
int64_t sched_state_boost_left(const sess_gpu_t *g, int64_t now);
/* Count it until now, then go on with `share` (0: the boost ends). */
void sched_state_boost_count(sess_gpu_t *g, int share, int64_t now);
/* The boost stops being counted (what is left of it is kept). */
void sched_state_boost_end(sess_gpu_t *g, int64_t now);

/* Queue an action for gs_sched_pop_action; returns it (owned by the
 * queue, valid until the next emit) for the fields only grants carry. */
gs_sched_action_t *sched_state_emit(gs_sched_t *s, gs_sched_act_kind_t kind, const char *client,
                                    int gpu, uint64_t grant_id, int64_t quantum,
                                    const char *reason);

#endif
