/*
 * scheduler.h - who may use which GPU when: the broker's scheduling logic.
 *
 * Pure logic with a virtual clock, so that it is tested deterministically:
 * no I/O, no clock of its own (every call takes now_us, microseconds of
 * CLOCK_MONOTONIC in the broker, anything monotonic in tests), no threads.
 * Calls feed it events (sessions, cells, clients, acquire/release, memory);
 * it answers with actions (grant, revoke) the broker turns into messages,
 * and with the next time it wants gs_sched_tick() to be called.
 *
 * Units: a session (a notebook kernel, or the process tree of a program
 * outside Jupyter) owns clients (hook processes); the scheduling unit is the
 * session on one GPU.  While a session holds a GPU, each of its clients that
 * asks is granted at once (one grant_id per client per GPU); revoking the
 * session revokes all of its clients' grants there, and the session has let
 * go when every one of them has released (or died).
 *
 * Policies (per GPU; doc/scheduling.md tells the whole story):
 *   exclusive  one holder at a time, FIFO, quantum tq, revoked only when
 *              someone waits (the thesis' anti-thrashing lock);
 *   burst      one holder at a time, quantum from the reported kernel bursts
 *              (Gemini), waiters chosen by request/limit shares of GPU time
 *              over a sliding window; a limit is hard;
 *   adaptive   everyone who wants the GPU holds it at once while their
 *              memory fits, time slices when it does not (turns of at
 *              least 10 x the measured switch cost), and cells that just
 *              started get the GPU for a short boost, shared only with
 *              each other.
 * Always: a cell that finishes has its grants revoked at once; the first
 * grant on an idle GPU is immediate.  Scheduler off: every acquire is
 * granted at once and nothing is revoked (monitoring only).
 */
#ifndef GS_SCHEDULER_H
#define GS_SCHEDULER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "scheduler_config.h"
#include "scheduler_types.h"

/* A session on one GPU, for status and metrics. */
typedef struct {
    gs_sched_state_t state;
    int64_t gpu_time_us;  /* time holding the GPU (grant hold time), up to now */
    int64_t wait_time_us; /* time between acquire and grant, up to now */
    uint64_t grants, revokes;
    uint64_t resident_bytes; /* sum of its clients' reported used_bytes */
    int64_t quantum_us;      /* current slice (0: none / until revoked) */
    int boosted;             /* adaptive: holds it under a boost (beside boosted cells only) */
    int64_t boost_left_us;   /* boost GPU time left for the running cell */
    double request, limit;   /* its shares */
    double share_used;       /* burst: fraction of the window it held the GPU */
    int64_t tau_us;          /* burst: its last quota (0 before the first) */
    /* for parking decisions */
    int registered;                 /* a notebook (has cell events) */
    int cell_busy;                  /* a cell is running */
    int64_t cell_start_us;          /* when it started */
    int64_t last_active_us;         /* last cell start/end, acquire, grant or release */
    int wants;                      /* a client asked for this GPU and was not granted yet */
    int demand;                     /* waits for the GPU on its cell's behalf (gs_sched_demand) */
    gs_sched_residency_t residency; /* as set by gs_sched_set_residency */
    /* switching (adaptive, parking's time slicing) */
    int64_t switch_cost_us;   /* its memory out and back (gs_sched_set_move_rates); 0: unknown */
    int64_t min_slice_us;     /* 10 x switch_cost_us: its turns last at least that */
    int64_t turn_end_us;      /* its turn on the GPU ends then; 0: no turn */
    int64_t idle_gap_us;      /* its running cell's usual idle gap (measured); 0: unknown */
    int64_t think_gap_us;     /* its usual pause between cells (measured); 0: unknown */
    int switchable;           /* holds nothing and may be switched out now (see below) */
    int64_t switchable_at_us; /* if not yet, when it will be (GS_SCHED_NEVER: not by time) */
} gs_sched_info_t;

/* ---- life ------------------------------------------------------------------ */

/* ngpus GPUs with their memory sizes in bytes (0 = unknown: always fits). */
gs_sched_t *gs_sched_new(int ngpus, const uint64_t *memory_total);
void gs_sched_destroy(gs_sched_t **self_p);

/* Settings: scheduler_config.h (included above). */

/* ---- events --------------------------------------------------------------- */

/* A launcher registered session id (created if new, e.g. by a hook's join
 * after a broker restart). */
void gs_sched_register(gs_sched_t *self, const char *session, int64_t now_us);

/* The launcher unregistered it: its grants are revoked ("cell_idle") and
 * it is forgotten once its last client is gone.  Returns -1 when the
 * session is unknown or was not registered. */
int gs_sched_unregister(gs_sched_t *self, const char *session, int64_t now_us);

/* Cell busy (1) or idle (0).  Idle revokes the session's grants at once
 * ("cell_idle"); busy starts the interactive boost. -1: unknown session. */
int gs_sched_cell(gs_sched_t *self, const char *session, int busy, int64_t now_us);

/* A hook joined session (created unregistered if new).  A client that
 * joins again leaves its old session first (as if it had died). */
int gs_sched_join(gs_sched_t *self, const char *client, const char *session, int64_t now_us);

/* The client wants the GPU.  burst_*_us < 0: not reported.  A client that
 * already holds a grant gets it again (same grant_id). -1: unknown client
 * or GPU. */
int gs_sched_acquire(gs_sched_t *self, const char *client, int gpu, int64_t burst_p90_us,
                     int64_t burst_last_us, int64_t now_us);

/* The client gave grant_id back (any reason).  A release naming a grant
 * the client does not hold is ignored (returns 1); -1: unknown client. */
int gs_sched_release(gs_sched_t *self, const char *client, int gpu, uint64_t grant_id,
                     int64_t now_us);

/* The client's device memory on the GPU. */
int gs_sched_memory(gs_sched_t *self, const char *client, int gpu, uint64_t used_bytes,
                    int64_t now_us);

/* The client is gone (exited, killed, silent): its grants are released,
 * its requests and memory forgotten.  Returns 1 when this left an
 * unregistered session without clients (the session was removed too), 0
 * otherwise, -1 for an unknown client. */
int gs_sched_client_gone(gs_sched_t *self, const char *client, int64_t now_us);

/* ---- parking (broker/park*.c moves memory; the scheduler keeps order) ---- */

/* Where the session's memory is.  A session that is not RESIDENT is never
 * granted: it keeps its place in the queues, and under adaptive a parked
 * waiter reserves its footprint as if it held the GPU (so slices of holders
 * are cut to let it in).  Leaving RESIDENT revokes its holds ("park").
 * -1: unknown session. */
int gs_sched_set_residency(gs_sched_t *self, const char *session, gs_sched_residency_t r,
                           int64_t now_us);

/* Demand without an acquire: a parked notebook whose cell started cannot
 * ask (its processes are blocked inside the locked driver), so it waits in
 * the GPU's queue as if it had asked, until on = 0, its cell ends, or one of
 * its clients asks and is granted.  -1: unknown session or GPU. */
int gs_sched_demand(gs_sched_t *self, const char *session, int gpu, int on, int64_t now_us);

/* How the session's memory on the GPU moves (gs_sched_move_t).  Its switch
 * cost is then what a switch moves over each rate, summed (halved when
 * the two ways overlap), and under adaptive:
 *  - its turns last max(the adaptive slice, 10 x the switch cost), so that
 *    copying takes at most a tenth of the GPU's time;
 *  - holding nothing while its cell runs (an idle release between GPU
 *    phases), it may be switched out (gs_sched_info's switchable) only
 *    when its turn is over, or its GPU has been idle for longer than a
 *    switch costs, or its measured idle gaps are that long (a switch that
 *    fits in its own idle gap is the cheap one); until then it keeps its
 *    turn, and is granted again at once when it asks.
 * -1: unknown session or GPU. */
int gs_sched_set_move(gs_sched_t *self, const char *session, int gpu, const gs_sched_move_t *m);
/* gs_sched_set_move of a whole park at these rates (bytes 0, not overlapped). */
int gs_sched_set_move_rates(gs_sched_t *self, const char *session, int gpu, double out_bps,
                            double in_bps);

/* The session was placed on several GPUs (scheduler_gang.c tells why): it is granted
 * a GPU of them only while it holds every lower one, and a revoke on one
 * revokes all.  n < 2 GPUs: no gang.  -1: unknown session. */
int gs_sched_set_gang(gs_sched_t *self, const char *session, const int *gpus, int n);
/* Its gang as a bit mask of GPUs (0: none). */
unsigned gs_sched_gang(const gs_sched_t *self, const char *session);

/* The session holds (or is being revoked on) any GPU. */
int gs_sched_session_holding(const gs_sched_t *self, const char *session);

/* Timers: call when now_us >= gs_sched_next_deadline(). */
void gs_sched_tick(gs_sched_t *self, int64_t now_us);

/* When the next tick is due (GS_SCHED_NEVER: only events matter). */
int64_t gs_sched_next_deadline(const gs_sched_t *self);

/* Take the oldest pending action; 0 when there is none. */
int gs_sched_pop_action(gs_sched_t *self, gs_sched_action_t *out);

/* ---- queries --------------------------------------------------------------- */

int gs_sched_has_session(const gs_sched_t *self, const char *session);
int gs_sched_session_registered(const gs_sched_t *self, const char *session);
/* Number of grants the client holds (all GPUs); -1 unknown client. */
int gs_sched_client_grants(const gs_sched_t *self, const char *client);

/* The session on a GPU; 0, or -1 when unknown.  "Used" sessions on a GPU
 * are those that held, asked for or have memory on it. */
int gs_sched_info(const gs_sched_t *self, const char *session, int gpu, int64_t now_us,
                  gs_sched_info_t *out);
int gs_sched_session_used_gpu(const gs_sched_t *self, const char *session, int gpu);

/* Why client's acquire of gpu is not granted yet, for the line the hook
 * prints when a cell waits: the number of holders, the first holder's
 * session id, and the most time left of the holders' slices
 * (GS_SCHED_NEVER when some holder keeps the GPU for as long as its cell
 * runs).  Returns 0 when the client holds the GPU or asked for nothing. */
typedef struct {
    int nholders;
    char holder[GS_SCHED_ID_MAX];
    int64_t left_us;
} gs_sched_wait_t;
int gs_sched_wait_info(const gs_sched_t *self, const char *client, int gpu, int64_t now_us,
                       gs_sched_wait_t *out);

/* Sessions holding / waiting for a GPU (waiting in arrival order), as a
 * JSON array of ids.  New reference. */
json_t *gs_sched_holders_json(const gs_sched_t *self, int gpu);
json_t *gs_sched_waiting_json(const gs_sched_t *self, int gpu);

#endif
