/*
 * scheduler_types.h - the scheduler's value types and limits: settings,
 * actions, residency, how a session's memory moves.  The public API
 * (scheduler.h) and the library's own files (scheduler_state.h and up) both
 * use them, so they sit below every file of broker/sched and call nothing.
 */
#ifndef GS_SCHEDULER_TYPES_H
#define GS_SCHEDULER_TYPES_H

#include <stdint.h>

#define GS_SCHED_MAX_GPUS 16
#define GS_SCHED_ID_MAX   140 /* session ids: a name of <= 128 bytes, "@" and a uid (sessions.h) */
#define GS_SCHED_NEVER    INT64_MAX

typedef struct gs_sched gs_sched_t;

typedef enum { GS_POLICY_EXCLUSIVE, GS_POLICY_BURST, GS_POLICY_ADAPTIVE } gs_sched_policy_t;

typedef struct {
    int enabled;              /* 0: grant everything at once, never revoke */
    gs_sched_policy_t policy; /* default adaptive */
    int64_t tq_us;            /* exclusive quantum (20 s) */
    double alpha, beta;       /* burst estimate and smoothing (0.5, 0.5) */
    int64_t quota_min_us;     /* burst quota bounds (20 ms, 2 s) */
    int64_t quota_max_us;
    int64_t quota_base_us;   /* burst: a session's first tau_last (300 ms) */
    int64_t window_us;       /* burst share window (10 s) */
    double request, limit;   /* default shares of GPU time (0, 1) */
    int64_t boost_us;        /* adaptive interactive boost, GPU time (500 ms) */
    int64_t adaptive_min_us; /* adaptive slice bounds (2 s, 20 s) */
    int64_t adaptive_max_us;
    double headroom; /* fraction of GPU memory kept free (0.05) */
} gs_sched_config_t;

typedef enum { GS_ACT_GRANT, GS_ACT_REVOKE } gs_sched_act_kind_t;

typedef struct {
    gs_sched_act_kind_t kind;
    char client[GS_SCHED_ID_MAX];
    int gpu;
    uint64_t grant_id;
    int64_t quantum_us; /* grants: time left of the session's slice, 0 = until revoked */
    const char *reason; /* revokes: "quantum", "cell_idle", "preempt", "policy" */
    /* grants: give it back after this long without submissions (0: the
     * hook's own idle release).  Set while a switch is wanted on the GPU,
     * so that a holder's idle gap is seen soon enough to switch in it; a
     * grant sent again with the same grant_id only changes this. */
    int64_t idle_release_us;
    int again;     /* grants: sent again with the same grant_id (a new idle_release_us) */
    uint64_t turn; /* grants: the session's turn on this GPU (1, 2, ...; a turn
                    * outlives the idle releases of its cell), 0: none */
} gs_sched_action_t;

typedef enum { GS_SESS_IDLE, GS_SESS_RUNNING, GS_SESS_WAITING } gs_sched_state_t;

/* Where a session's GPU memory is (parking, broker/park*.c). */
typedef enum {
    GS_SCHED_RESIDENT, /* on the GPU: may be granted */
    GS_SCHED_MOVING,   /* being parked or unparked: its processes are locked */
    GS_SCHED_PARKED    /* in host memory */
} gs_sched_residency_t;

/* What switching the session out of the GPU and back in moves, as
 * parking knows it (gs_sched_set_move). */
typedef struct {
    double out_bps, in_bps; /* how fast its memory leaves and comes back, bytes per second
                               (the session's own copies, or the GPU's for the tier it
                               would use); 0: it cannot move */
    uint64_t bytes;         /* what a switch moves each way; 0: its footprint (a whole park) */
    int overlapped;         /* its way out runs beside the way in of the session it makes
                               room for (the swap tier): the GPU waits about half the sum */
} gs_sched_move_t;

#endif
