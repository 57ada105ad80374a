/*
 * scheduler_internal.h - the scheduler's tables, shared by scheduler.c
 * (events, holds, accounting), scheduler_policy.c (the per-GPU decisions)
 * and scheduler_config.c (settings).  Tables are plain arrays searched
 * linearly: a machine has tens of sessions, not thousands; what every
 * decision needs per session is kept as a running total instead.
 */
#ifndef GS_SCHEDULER_INTERNAL_H
#define GS_SCHEDULER_INTERNAL_H

#include "scheduler.h"

typedef struct sched_session sched_session_t;

#define SCHED_GAPS         5  /* idle gaps remembered per session and GPU */
#define SCHED_SLICE_FACTOR 10 /* a turn lasts >= 10 x its switch cost */

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
    int gaps_stale;           /* they are the previous cell's (sched_gap_close) */
    int gap_switched;         /* switched out during the gap under way (sched_idle_gap) */
    unsigned char gap_was_switched[SCHED_GAPS]; /* per kept gap */
    int64_t phases[SCHED_GAPS]; /* its last GPU phases: a hold to its idle release */
    int nphases, phase_next;
    int64_t hint; /* idle_release_us its grants carry */
    /* Running totals over its clients, kept by set_wants and set_used in
     * scheduler.c: every decision asks for them, for every session, and
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

/* scheduler.c */
sched_session_t *sched_session_find(const gs_sched_t *s, const char *id);
void sched_emit(gs_sched_t *s, gs_sched_act_kind_t kind, const char *client, int gpu,
                uint64_t grant_id, int64_t quantum, const char *reason);
void sched_session_grant(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t quantum, int boosting,
                         int64_t now);
/* Ask a holder's grants for an idle release of `hint` us (0: the hook's
 * own): its grants are sent again when that changes. */
void sched_hint(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t hint, int64_t now);
void sched_session_revoke(gs_sched_t *s, sched_session_t *ss, int gpu, const char *reason,
                          int64_t now);
uint64_t sched_footprint(const gs_sched_t *s, const sched_session_t *ss, int gpu);
int sched_session_wants(const gs_sched_t *s, const sched_session_t *ss, int gpu);
/* May be granted now: resident, and one of its clients asked. */
int sched_grantable(const gs_sched_t *s, const sched_session_t *ss, int gpu);
void sched_shares(const gs_sched_t *s, const char *session, double *request, double *limit);
int64_t sched_window_used(const sess_gpu_t *g, int64_t now, int64_t window);
/* Sessions holding (oldest hold first) or waiting (arrival order) on a
 * GPU; malloc'd array of *n, the caller frees it. */
sched_session_t **sched_list(const gs_sched_t *s, int gpu, int holders, int *n);

/* The boost is GPU time: holding it with k boosted cells uses 1/k. */
int64_t sched_boost_left(const sess_gpu_t *g, int64_t now);
/* Count it until now, then go on with `share` (0: the boost ends). */
void sched_boost_count(sess_gpu_t *g, int share, int64_t now);

/* scheduler_turns.c: switch costs, turns and idle gaps (adaptive) */
int64_t sched_switch_cost(const sess_gpu_t *g);
/* When the turn ends (0: no turn): its start + max(its slice, 10 x the
 * switch cost now, since rates and footprints change). */
int64_t sched_turn_end(const sess_gpu_t *g);
/* A turn is live until what is left of it is shorter than the holder's
 * idle release (sched_idle_hint, at least 10 ms): a grant for less would
 * be a round trip for nothing. */
int sched_turn_live(const sess_gpu_t *g, int64_t now);
/* Its turn ended while it held nothing, and a switch out is due: until the
 * returned time (the turn's end + a switch cost; 0: not due) it is not
 * given a new turn ahead of a parked waiter that needs its memory, since
 * parking is about to switch it out. */
int64_t sched_switch_due(const sess_gpu_t *g, int64_t now);
void sched_turn_begin(sess_gpu_t *g, int64_t slice, int64_t now);
void sched_turn_over(sess_gpu_t *g);
/* A release by itself (idle) and the acquire that ends the gap. */
void sched_gap_open(const sched_session_t *ss, sess_gpu_t *g, int64_t now);
void sched_gap_close(const sched_session_t *ss, sess_gpu_t *g, int64_t now);
int64_t sched_idle_gap(const sess_gpu_t *g);
/* A cell starts (busy) or ends: its pause between cells is measured. */
void sched_think_mark(sched_session_t *ss, int busy, int64_t now);
/* The median of its last pauses between cells; 0 while fewer than 3. */
int64_t sched_think_gap(const sched_session_t *ss);
/* May be switched out now; if not, *at says when it may (or NEVER). */
int sched_switchable(const sched_session_t *ss, const sess_gpu_t *g, int64_t now, int64_t *at);
/* The idle release its grants ask for while a switch is wanted: 0 when
 * it cannot move. */
int64_t sched_idle_hint(const sess_gpu_t *g);

/* scheduler_phases.c: cells that alternate GPU and CPU phases, out of
 * phase.  Its cell alternates (idle gaps measured in its cells). */
int sched_alternates(const sched_session_t *ss, const sess_gpu_t *g);
/* Waiter `who` alternates and a holder that alternates (of h[], or of w[]
 * granted in this decision) is in its GPU phase: `who` waits until the
 * returned time, and the holder is asked to give the GPU back soon after
 * its phase; 0: grant it now. */
int64_t sched_phase_wait(gs_sched_t *s, sched_session_t **h, int nh, sched_session_t **w, int nw,
                         const sched_session_t *who, int gpu, int64_t now);

/* scheduler_gang.c: a session on several GPUs holds them together */
/* It may be granted gpu: it holds every lower GPU of its gang (1 when it
 * has no gang). */
int sched_gang_ready(const sched_session_t *ss, int gpu);
/* Revoked on gpu: revoked on the rest of its gang too. */
void sched_gang_revoke(gs_sched_t *s, sched_session_t *ss, int gpu, const char *reason,
                       int64_t now);
/* Keeps the waiters of w[] that may be granted gpu now; returns how many. */
int sched_gang_filter(sched_session_t **w, int nw, int gpu);

/* scheduler_policy.c: decide grants and revokes on one GPU; returns when
 * it wants to decide again (> now, or GS_SCHED_NEVER). */
int64_t sched_decide(gs_sched_t *s, int gpu, int64_t now);
int64_t sched_burst_quota(const gs_sched_config_t *cfg, sess_gpu_t *g);

#endif
