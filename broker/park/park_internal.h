/*
 * park_internal.h - parking's state in the broker, shared by park.c (life,
 * settings, joins, jobs started and finished), park_poll.c (what to park or
 * unpark now), park_room.c (make_room requests), park_victims.c (the
 * sessions as they are, free memory, victims), park_swap.c (the swap tier's
 * conversation with the hooks) and park_status.c (status).
 */
#ifndef GS_PARK_INTERNAL_H
#define GS_PARK_INTERNAL_H

#include "park.h"
#include "park_cuda.h"
#include "park_worker.h"
#include "host_ledger.h"
#include "host_meminfo.h"
#include "sched/park_policy.h"
#include "pool_socket.h"
#include "swap_pools.h"

/* How a session is parked: the checkpoint API (the broker copies, any
 * process) or the swap tier (its hooks copy, at the speed of the link). */
enum { TIER_CHECKPOINT = 0, TIER_SWAP = 1 };
/* The swap tier's conversation under way. */
enum { SWAP_NONE = 0, SWAP_OUT, SWAP_ROLLBACK, SWAP_IN };

/* Where a session's memory is, as parking sees it. */
typedef enum {
    PS_RESIDENT,
    PS_REVOKING, /* to be parked: its grant was revoked, its release awaited */
    PS_PARKING,  /* lock + checkpoint under way */
    PS_PARKED,
    PS_UNPARKING /* restore + unlock under way */
} pstate_t;

typedef struct {
    char id[GS_SCHED_ID_MAX];
    pstate_t st;
    int failed;    /* the last operation failed: status "failed: <why>" */
    int stuck;     /* a process was left locked or checkpointed */
    char why[520]; /* the last failure (kept after a success, park_error) */
    int npids;     /* the processes parked (unparked together) */
    int pids[GS_PARK_MAX_PIDS];
    unsigned long long start[GS_PARK_MAX_PIDS];
    uint64_t bytes[GS_MAX_GPUS]; /* parked, or being parked, per GPU */
    uint64_t parks, unparks;
    double park_s, park_gbps, unpark_s, unpark_gbps; /* the last ones; < 0: none yet */
    int64_t since;                                   /* the operation under way began */
    int64_t demand_since;                            /* parked and needs the GPU since (0: no) */
    int64_t demand_expire; /* after an unpark: drop the demand if no acquire by then */
    int64_t retry_at;      /* a failed unpark is tried again then */
    int retries;
    uint64_t oom_extra;  /* more room asked for after an unpark ran out of GPU memory */
    int64_t unparked_at; /* its slice is protected from time slicing */
    uint64_t grants_at_unpark[GS_MAX_GPUS];
    uint64_t job;      /* id of the job under way, 0 = none */
    int noted;         /* "cannot make room" logged for this demand */
    int no_demand;     /* the host budget stops its unpark: not queued (it would hold the GPU's
                          queue up for nothing) until a job ends or a setting changes */
    int tier;          /* TIER_*: how it is (being) parked */
    int64_t parked_at; /* the last park ended then */
    int demoting;      /* brought back from the swap tier to go to the deep tier */
    int deep_next;     /* its next park goes to the checkpoint tier */
    int64_t pool_refused_at; /* swap-only, and the pool could not take it then */
    int64_t room_refused_at; /* a make_room of its own was refused then (park_room.c) */
    int64_t exiting_at;      /* a park found its processes gone then: their exit frees the memory */
    int asked;               /* its notebook asked to be parked (`park`): once it is idle */
    /* Parked on the checkpoint tier only because the pool lacked room: the
     * pool grows by its footprint (pool_short bytes on GPU pool_short_gpu),
     * so that its next park is a swap (park_swap_targets). */
    uint64_t pool_short;
    int pool_short_gpu;
    /* Waiting (as PS_REVOKING) for the pool to finish pinning or zeroing
     * what its lease needs, since then (0: not waiting). */
    int64_t pool_wait_since;
    /* its own copy rates (park_rates.c), measured on rates_tier */
    double out_bps, in_bps;
    int rates_tier;
    uint64_t segment; /* the largest segment its hooks move memory in (park_rates.c) */
    gs_sched_move_t told[GS_MAX_GPUS]; /* what the scheduler was told */
    /* swap tier (park_swap.c) */
    int swap_gpu, swap_phase, swap_waiting, swap_failed, swap_rollback_failed;
    int64_t swap_deadline, swap_elapsed_us;
    char swap_error[300], swap_first_error[300];
    /* The session this park makes room for (park_victims.c): when it comes
     * back from the swap tier of the same GPU, its chunks are relayed to
     * this one as they free up (park_swap.c, relay_lease). */
    char room_for[GS_SCHED_ID_MAX];
    int relay; /* its lease grows: swap_out waits for chunks (relay_wait_ms) */
    /* A partial park (swap tier, a switch): part[g] is what the session
     * coming back needs, so only about that much goes out (park_victims;
     * 0: everything); moved_out sums what the hooks moved; partial: parked
     * with the rest still on the GPU (bytes[] is what is out, its
     * footprint less bytes[] stays resident, park_free_signed). */
    uint64_t part[GS_MAX_GPUS];
    uint64_t moved_out;
    int partial;
    /* Parked in part and now parked further, for room its remainder can
     * give (park_swap_try_park): out_before is what was out already. */
    int rest;
    uint64_t out_before;
    /* park_move.c: restored onto GPU move_to instead of move_from (-1: in
     * place); no_move: the driver refused once, never again */
    int move_from, move_to, no_move;
    uint64_t moves;
    char move_refused[400];
} psess_t;

/* What a swap-tier client is asked and has not answered yet. */
enum { CW_NONE = 0, CW_OUT, CW_IN };

typedef struct {
    char key[64];
    char session[GS_SCHED_ID_MAX];
    long pid;                 /* from the socket credentials; 0 unknown */
    long uid;                 /* likewise; -1 unknown */
    unsigned long long start; /* when pid started (proc_alive.h), 0 unknown */
    int managed;
    int swap;                      /* its hook can swap (join) */
    uint64_t segment;              /* and moves memory in segments of this size (join) */
    uint64_t used[GS_MAX_GPUS];    /* its memory report */
    uint64_t movable[GS_MAX_GPUS]; /* of which it can swap out */
    uint64_t swapped[GS_MAX_GPUS]; /* out in host memory, as its hook reports */
    uint64_t peak[GS_MAX_GPUS];    /* the most it has held (a partial park leaves room for it) */
    uint64_t lease;                /* host memory lent to it (swap tier), 0 none */
    int lease_chunks;
    int swap_wait;  /* CW_*: the answer awaited */
    int swap_moved; /* its swap_out moved something (a rollback must bring it back) */
} pclient_t;

/* What a process the broker dropped while it ran on (stopped past the
 * heartbeat limit, its connection closed, joining again) still holds: its
 * device memory, which no one else may be promised, and its lease, whose
 * chunks it still maps and may keep its memory in.  Both stay its own until
 * it joins again (its new client takes them over) or dies. */
typedef struct held_proc {
    long pid;
    unsigned long long start;
    char session[GS_SCHED_ID_MAX];
    uint64_t used[GS_MAX_GPUS]; /* its last memory report */
    uint64_t lease;
    int chunks, gpu, moved;
    struct held_proc *next;
} held_proc_t;

/* A make_room waiting for victims. */
typedef struct room {
    zframe_t *peer;
    long long seq;
    int gpu;
    uint64_t bytes;
    char session[GS_SCHED_ID_MAX];
    int64_t since, deadline;
    uint64_t goal;  /* answer ok once the estimated free memory reaches this */
    int rounds;     /* victim sets started for it */
    int failures;   /* of which a victim's park failed (tried again a few times) */
    char fail[420]; /* a victim's park failed: the answer's reason */
    int told_ok;    /* the hook said how long it waits: it is told why it waits */
    char told[420]; /* the last reason it was told (room with waiting: true) */
    struct room *next;
} room_t;

/* Memory promised to a make_room that was answered ok, until the hook's
 * next memory report shows it (or a second passes). */
typedef struct {
    char session[GS_SCHED_ID_MAX];
    int gpu;
    uint64_t bytes, base; /* base: the session's footprint when promised */
    int64_t until;
} resv_t;

#define PARK_MAX_RESV 64

/* The segment of a hook that did not say (older than `swap_segment_bytes`
 * in join): 1 GiB, what hooks moved then. */
#define PARK_OLD_SEGMENT (1ull << 30)

/* How long an unpark for a cell that has just started waits before it
 * makes room: cell events of cells started together arrive within a few
 * milliseconds of each other (park_poll.c). */
#define PARK_START_GRACE_US 20000

/* An answer for a client, waiting for the broker to send it. */
typedef struct answer {
    zframe_t *peer;
    json_t *msg;
    struct answer *next;
} answer_t;

struct gs_park {
    gs_sched_t *sched;       /* told where each session's memory is */
    gs_sessions_t *sessions; /* read: which sessions exist */
    gs_eventlog_t *eventlog; /* NULL = off */
    char uuids[GS_MAX_GPUS][48];
    /* The broker's inventory (it outlives the park): UUID bytes for moves. */
    const gs_gpu_inventory_t *inv;
    char names[GS_MAX_GPUS][96]; /* the model: a move stays within one */
    gs_park_move_hooks_t move;   /* the broker's say in moves (park_move.c) */
    gs_swap_pools_t *pools;      /* the swap tier's host memory; NULL: unavailable */
    gs_pool_socket_t *pool_sock; /* where hooks fetch it */
    char swap_unavailable[200];
    gs_park_config_t cfg;
    uint64_t host_ram;
    gs_host_meminfo_t mem; /* the machine's, read at mem_at (park_ledger.c) */
    int64_t mem_at;
    char mem_err[200];
    gs_park_cuda_t *api; /* NULL: unavailable */
    char unavailable[200];
    gs_park_worker_t *worker;
    int ngpus;
    uint64_t total[GS_MAX_GPUS];
    /* copy rates per tier and GPU (park_rates.c); last_tier: the last copy's */
    double out_bps[2][GS_MAX_GPUS], in_bps[2][GS_MAX_GPUS];
    int last_tier[GS_MAX_GPUS];
    zhashx_t *sess;    /* id -> psess_t */
    zhashx_t *clients; /* key -> pclient_t */
    room_t *rooms;
    resv_t resv[PARK_MAX_RESV];
    int nresv;
    uint64_t next_job;
    char last_refusal[560]; /* the last make_room answered ok:false, for status */
    int64_t wake;
    int changed;                      /* the scheduler's state changed (gs_park_poll's result) */
    answer_t *answers, **answers_end; /* FIFO, for gs_park_next_answer */
    held_proc_t *held;                /* park_swap.c */
    int64_t targets_at;    /* the pools' targets are worked out again then (park_poll.c) */
    int targets_stale;     /* an event came since they were */
    int64_t held_check_at; /* when to look whether their processes still live */
};

/* park.c */
psess_t *park_sess(gs_park_t *p, const char *id, int create);
/* Queue msg (consumed) for peer (copied): the broker sends it (gs_park_next_answer). */
void park_answer(gs_park_t *p, zframe_t *peer, json_t *msg);
/* Start parking / unparking (scheduler told, job submitted or awaited). */
int park_start(gs_park_t *p, psess_t *ps, const char *why, int64_t now);
/* A victim whose grant was released: its job starts. */
void park_submit(gs_park_t *p, psess_t *ps, int64_t now);
void park_start_unpark(gs_park_t *p, psess_t *ps, const char *why, int64_t now);
/* Processes of a session that parking would act on; 0 with *reason when
 * the session cannot be parked (static reasons: managed memory, ...). */
int park_session_pids(const gs_park_t *p, const char *session, int *pids, int max,
                      const char **reason);
uint64_t park_host_used(const gs_park_t *p);
/* Why the session cannot be parked now, whatever its activity ("managed
 * memory", "parking is off on GPU 1", ...); 0 with out empty when it can. */
int park_unparkable(const gs_park_t *p, const char *session, int64_t now, char *out, size_t len);
/* A session whose processes a park found gone is exiting: its memory
 * frees by itself, it is not picked for a moment (park_unparkable). */
int park_exiting(const psess_t *ps, int64_t now);
/* A session the pool refused is not picked for a moment (park_unparkable);
 * the poll looks again when that moment ends, since no event may come then:
 * everyone idle, and the session that waits for the room has asked already
 * (after a broker restart, a parked hook's only acquire). */
void park_pause_wake(gs_park_t *p, const psess_t *ps, int64_t now);

/* The end of a park or unpark, from a worker job or the swap tier. */
void park_finish_park(gs_park_t *p, psess_t *ps, const gs_park_job_t *j, int64_t now);
void park_finish_unpark(gs_park_t *p, psess_t *ps, const gs_park_job_t *j, int64_t now);

/* park_swap.c: the swap tier.  Its swap_out and swap_in go to the hooks
 * through the answer queue (park_answer), like make_room's answers. */
int park_swap_available(const gs_park_t *p);
/* Every process of the session can swap its memory on GPU g, and what
 * cannot move is small: the swap tier would take it (if the pool can lend
 * the host memory then). */
int park_swap_suits(const gs_park_t *p, const char *session, int g);
/* The swap tier could park the session in part on GPU g now: it suits
 * the tier and one process moves its memory there. */
int park_swap_can_part(gs_park_t *p, const char *session, int g);
/* Parks ps on the swap tier if it qualifies and the pool can lend: 1
 * started; 2 waiting for the pool, which is pinning or zeroing what it
 * lacks (ps is PS_REVOKING again: tried at each poll, at most
 * POOL_WAIT_MAX); 0 nothing done: the checkpoint tier takes it. */
int park_swap_try_park(gs_park_t *p, psess_t *ps, int64_t now);
void park_swap_unpark(gs_park_t *p, psess_t *ps, int64_t now);
/* Deadlines of the conversations under way. */
void park_swap_check(gs_park_t *p, int64_t now);
/* c goes; unless it exited, what its process holds while it lives on is
 * held for it (held_proc_t). */
void park_swap_client_gone(gs_park_t *p, pclient_t *c, int exited, int64_t now);
/* c (just joined) takes over what is held for its process. */
void park_swap_client_back(gs_park_t *p, pclient_t *c, int64_t now);
/* Whether a process of the session still holds host memory (a lease, or
 * one held for it). */
int park_swap_session_holds(const gs_park_t *p, const char *session);
/* A hook reports memory still in host memory while its session is not
 * parked on the swap tier (a swap its broker lost track of): the session
 * counts as parked there, so that its next unpark brings it back. */
void park_swap_reported_out(gs_park_t *p, pclient_t *c, int gpu, uint64_t swapped, int64_t now);
/* The same for every process of ps that last reported memory out, once a
 * park or unpark of ps ends with it resident: a checkpoint restore brings
 * back what was on the GPU, not what a hook had moved to host memory. */
void park_swap_still_out(gs_park_t *p, psess_t *ps, int64_t now);
void park_swap_free_held(gs_park_t *p);
/* Device memory of GPU g held by dropped processes that live on. */
uint64_t park_swap_held_used(const gs_park_t *p, int g);
/* Return what dropped processes that are gone held (every second). */
void park_swap_check_held(gs_park_t *p, int64_t now);
/* A hook's `swapped` (gs_park_on_swapped). */
void park_swap_answered(gs_park_t *p, pclient_t *c, int gpu, const json_t *msg, int64_t now);
/* Host bytes the session room_for would free on GPU g while a session
 * goes out to make room for it (the switch's relay; 0: none). */
uint64_t park_swap_relayable(gs_park_t *p, const char *room_for, int g);
/* Bytes of GPU gpu that swap-tier parks under way are giving back. */
uint64_t park_swap_leaving(const gs_park_t *p, int gpu);
/* The pools' targets from what is parked and who holds memory. */
void park_swap_targets(gs_park_t *p);

/* park_victims.c: the sessions as they are now */
typedef struct {
    gs_session_t *s;
    psess_t *ps;
    gs_sched_info_t si[GS_MAX_GPUS];
    uint64_t foot[GS_MAX_GPUS]; /* the hooks' reports */
    uint64_t host;              /* on all GPUs */
    int holding, wants, demand, cell_busy, registered;
    int64_t last_active;
    char reason[96]; /* why it cannot be parked; "" = it can */
} park_view_t;

typedef struct {
    park_view_t *v; /* malloc'd; NULL without memory */
    int n;
} park_views_t;

/* park_move.c: the GPU a checkpointed session coming back to crowded GPU
 * g may be restored onto instead (-1: none), the driver's pairs for it
 * (their count; 0: the UUIDs are unreadable), and what a finished unpark
 * job says of the move (the session's bytes follow it, its hooks are
 * told; a refusal is kept as its park_error and it is not moved again). */
int park_move_target(gs_park_t *p, const park_views_t *vs, const park_view_t *v, int g);
int park_move_pairs(const gs_park_t *p, int from, int to, gs_park_gpu_pair_t *pairs);
void park_move_finish(gs_park_t *p, psess_t *ps, const gs_park_job_t *j, int64_t now);

/* park_frozen.c: the session's hooks are told that the checkpoint tier
 * locks their process (frozen) or restored it, for each GPU it has memory
 * on (ps->bytes). */
void park_tell_frozen(gs_park_t *p, const psess_t *ps, int frozen);

/* park.c: the GPU memory an unpark job's restore needs (gs_park_job_t's
 * room), waiting up to wait_ms for the driver to show it free. */
void park_job_room(const gs_park_t *p, const psess_t *ps, gs_park_job_t *j, unsigned wait_ms);

park_views_t park_views(gs_park_t *p, int64_t now);
/* Forget the records of sessions the broker has forgotten. */
void park_prune(gs_park_t *p, const park_views_t *vs);
/* Estimated free memory of GPU g (below zero when more is promised than
 * the GPU has, which a switch's pipeline does while memory leaves), and
 * the margin kept for rounding. */
int64_t park_free_signed(const gs_park_t *p, const park_views_t *vs, int g);
uint64_t park_free(const gs_park_t *p, const park_views_t *vs, int g);
uint64_t park_margin(const gs_park_t *p, int g);
/* A park that frees memory of GPU g is under way. */
int park_in_flight(const park_views_t *vs, int g);
/* Choose victims for need bytes on GPU g (not `exclude`; time-slice
 * victims with allow_switched) and start parking them (why: the log). */
gs_park_pick_rc_t park_victims(gs_park_t *p, park_views_t *vs, int g, uint64_t need,
                               const char *exclude, int allow_switched, int64_t deadline,
                               int64_t now, int64_t *wait_until, const char *why);
/* The reason of a refusal: where the memory is, or the budget. */
void park_explain(gs_park_t *p, const park_views_t *vs, int g, uint64_t need, const char *exclude,
                  gs_park_pick_rc_t rc, int64_t now, char *out, size_t len);
const char *park_mib(char *buf, size_t len, uint64_t bytes);

/* park_rates.c: what switching costs, per tier and GPU and per session */
void park_rates_init(gs_park_t *p);
/* A copy of `bytes` that took `seconds` (out: a park). */
void park_rates_measured(gs_park_t *p, psess_t *ps, int out, uint64_t bytes, double seconds);
/* Tell the scheduler how fast each session's memory would move now. */
void park_rates_tell(gs_park_t *p, const park_views_t *vs);

/* park_ledger.c: host memory through one ledger (host_ledger.h) */
gs_host_ledger_t park_ledger(const gs_park_t *p);
/* Reads the machine (at most once a second), derives the auto budget and
 * steers the pools' budget by the ledger. */
void park_ledger_refresh(gs_park_t *p, int64_t now);
int64_t park_ledger_next(const gs_park_t *p);
/* Host bytes a park on GPU g may take now: the ledger's room and the
 * unused chunks of g's pool (every pool's for g < 0). */
uint64_t park_host_room(const gs_park_t *p, int g);
/* May ps be checkpointed (its image in host memory)?  1; or 0 with why. */
int park_ledger_take_image(gs_park_t *p, const psess_t *ps, char *why, size_t len);
json_t *park_ledger_json(const gs_park_t *p);

/* park_room.c: make_room requests */
void park_room_reply(gs_park_t *p, room_t *r, int ok, uint64_t free_bytes, const char *reason);
/* 1: answered (go on with the next need); 0: it waits. */
int park_serve_room(gs_park_t *p, park_views_t *vs, room_t *r, int64_t now);
void park_expire_reservations(gs_park_t *p, const park_views_t *vs, int64_t now);

#endif
