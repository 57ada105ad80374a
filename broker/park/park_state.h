/*
 * park_state.h - parking's state in the broker, at the bottom of park/:
 * the sessions as parking knows them (psess_t), the hook clients it may act
 * on (pclient_t), make_room requests waiting (room_t), the answers waiting
 * for the broker to send them, and struct gs_park that holds them all.
 * Every other park_*.c reads and writes these fields; the functions here
 * are the few that all of them need (a session's record, queueing an
 * answer, a size for the log).  Nothing here calls upwards.
 */
#ifndef GS_PARK_STATE_H
#define GS_PARK_STATE_H

#include <czmq.h>
#include <jansson.h>
#include <stdint.h>

#include "eventlog.h"
#include "sessions.h"
#include "sched/scheduler.h"
#include "park_move_hooks.h"
#include "park_backend.h"
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
    /* Brought back for its running cell, it went out again without asking
     * for the GPU: while that cell runs, it comes back when it asks
     * (park_poll.c), not for the cell alone. */
    int cell_guess_missed;
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
     * footprint less bytes[] stays resident, park_views_free_signed). */
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
    /* The disk tier (park_disk.c): DISK_* of its memory there, since when,
     * copies awaited, a move that failed (not tried again for a while) and
     * why. */
    int disk;
    int64_t disk_since;
    int disk_pending;
    int disk_cancel; /* it is wanted back while its copy to disk runs */
    int disk_failed; /* a copy of this move failed (disk_error says why) */
    int64_t disk_refused_at;
    int disk_refused_logged;
    char disk_error[400];
} psess_t;

/* Where a session is on the disk tier (psess_t.disk). */
enum {
    DISK_NONE = 0, /* in pool chunks (or not parked) */
    DISK_WRITING,  /* its chunks are being copied to its images */
    DISK_DROPPING, /* written: its hooks are giving the chunks back (swap_drop) */
    DISK_ON,       /* on disk, its chunks back in the pool */
    DISK_READING,  /* coming back: its images into new chunks, then swap_in */
};

/* One process' parked memory on the disk tier: its image, and the copy
 * under way (park_disk.c). */
typedef struct disk_img {
    char session[GS_SCHED_ID_MAX];
    char key[64]; /* its client */
    long pid, uid;
    unsigned long long start;
    int gpu, chunks;
    uint64_t bytes;            /* what the image holds: chunks of the pool's size */
    uint64_t lease;            /* writing: the lease it came from; reading: the new one */
    struct gs_disk_move *move; /* a copy under way (disk_mover.h) */
    struct gs_disk_file *file; /* the sealed image */
    char path[300];            /* its path, once sealed */
    int dropped;               /* its hook gave the chunks back */
    int reading;               /* coming back: into chunks (its lease once it has them) */
    int adopted;               /* found at start, left by a broker that is gone */
    struct disk_img *next;
} disk_img_t;

/* What a swap-tier client is asked and has not answered yet. */
enum { CW_NONE = 0, CW_OUT, CW_IN, CW_DROP };

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
    int host_bound; /* its last pick failed for host memory: the disk tier may help */
    int unseen;     /* it failed where the estimate had room (park_room.c, rebase) */
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
    /* the checkpoint API and its worker threads (park_backend.h), a
     * malloc'd table; NULL: unavailable */
    gs_park_backend_t *api;
    char unavailable[200];
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
    /* swap-tier phases that ended (park_swap.c), as jobs: FIFO through
     * their next, for park_jobs_finish_swaps */
    gs_park_job_t *swap_done, **swap_done_end;
    held_proc_t *held;     /* park_swap.c */
    int64_t targets_at;    /* the pools' targets are worked out again then (park_poll.c) */
    int targets_stale;     /* an event came since they were */
    int64_t held_check_at; /* when to look whether their processes still live */
    /* The disk tier (park_disk.c): its copies' worker, the images, the
     * bytes they take, and the directory as last checked. */
    struct gs_job_queue *disk_q;
    disk_img_t *disk;
    uint64_t disk_used;
    char disk_dir_ok[256];             /* the park_disk_dir that passed its check ("": none) */
    uint64_t disk_coming[GS_MAX_GPUS]; /* chunks images coming back need (the pools' targets) */
    char disk_dir_error[300];
    int64_t disk_checked_at;
};

/* Also in park.h (the broker's name for it); a repeated typedef is C11. */
typedef struct gs_park gs_park_t;

/* The record of session id; created (a resident session that has never
 * been parked) when create is set; NULL if absent or without memory.
 * Owned by p (p->sess). */
psess_t *park_state_sess(gs_park_t *p, const char *id, int create);
/* The destructor of p->sess and p->clients' items (plain malloc'd records). */
void park_state_item_free(void **item);

/* Queue msg (ownership passes to the queue) for peer (copied): the broker
 * sends it (gs_park_next_answer).  Aborts without memory. */
void park_state_answer(gs_park_t *p, zframe_t *peer, json_t *msg);
/* The oldest answer queued, or NULL: the caller owns the message and
 * *peer (zframe_destroy). */
json_t *park_state_next_answer(gs_park_t *p, zframe_t **peer);

/* bytes as "12.0 MiB" or "1.5 GiB" in buf (returned). */
const char *park_state_mib(char *buf, size_t len, uint64_t bytes);
/* Bytes of all GPUs that parked (or stuck) sessions keep in host memory. */
uint64_t park_state_host_used(const gs_park_t *p);
/* Bytes of the session on all GPUs (ps->bytes). */
uint64_t park_state_total_bytes(const gs_park_t *p, const psess_t *ps);
/* Processes of a session that parking would act on; 0 with *reason when
 * the session cannot be parked (static reasons: managed memory, ...). */
int park_state_session_pids(const gs_park_t *p, const char *session, int *pids, int max,
                            const char **reason);
/* A session whose processes a park found gone is exiting: its memory
 * frees by itself, it is not picked for a moment (park_eligible.h). */
#define PARK_EXITING_PAUSE (2 * 1000000LL)
int park_state_exiting(const psess_t *ps, int64_t now);
/* Sizes are rounded up by the driver: the little more kept free than asked
 * on GPU g. */
uint64_t park_state_margin(const gs_park_t *p, int g);

#endif
