/*
 * park_policy.h - the decisions of parking, as pure functions: its settings,
 * which idle sessions to park for a given amount of memory, and how long a
 * slice must be for the copies to be worth it.  No I/O and no clock of its
 * own, so tests/unit/test_park.c checks them on a virtual clock; park.c
 * feeds them the broker's state and carries the decisions out.
 *
 * Why these rules (doc/parking.md tells the whole story):
 *  - least recently active first: FlexGPU parks the least used contents
 *    because they are the least likely to be needed back soon;
 *  - never more than needed: parking costs seconds per tens of GB each way,
 *    so the chosen set is pruned until no victim is redundant;
 *  - a host budget: parked memory lives in host RAM (in the parked
 *    process), and running the host out of memory would lose notebooks;
 *  - switch costs are measured (gs_park_policy_rate_update) and handed to
 *    the scheduler, whose turns last at least 10 x them, so that time
 *    slicing by parking spends at most a tenth of the GPU's time copying.
 */
#ifndef GS_PARK_POLICY_H
#define GS_PARK_POLICY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "scheduler.h" /* GS_SCHED_MAX_GPUS */

/* The H200 (driver 580) figures, until this machine has measured its own:
 * the checkpoint tier: 32 GiB checkpointed in ~16 s, restored in ~5.7 s;
 * the swap tier: ~35 GB/s each way during a switch (doc/parking.md). */
#define GS_PARK_DEFAULT_PARK_BPS   2.0e9
#define GS_PARK_DEFAULT_UNPARK_BPS 6.0e9
#define GS_PARK_DEFAULT_SWAP_BPS   35.0e9

typedef struct {
    int enabled;                    /* park = on|off (on) */
    int gpu_off[GS_SCHED_MAX_GPUS]; /* park.<gpu> = off */
    int64_t idle_us;                /* park_idle_s (30 s): idle this long to be parked */
    uint64_t host_budget;           /* park_host_budget in bytes (auto: what the host ledger
                                       allows, broker/park/host_ledger.h; kept up to date) */
    int budget_auto;                /* host_budget is "auto" */
    uint64_t host_reserve;          /* park_host_reserve: host memory never used for parking
                                       (reserve_auto: the ledger derives it, host_ledger.h) */
    int reserve_auto;
    uint64_t host_memory;    /* park_host_memory: host memory counted on (0: auto,
                                MemTotal or the cgroup's limit) */
    int plain;               /* park_plain (off): also park programs outside Jupyter */
    int swap;                /* park_swap (on): the swap tier where a session can use it */
    int64_t lock_timeout_us; /* park_lock_timeout_s (5 s) */
    int64_t deep_idle_us;    /* park_deep_idle_s (3600 s; 0: never): idle this long,
                                a session goes to the checkpoint tier */
    /* The disk tier (doc/parking.md): sessions parked on the swap tier move
     * to files in disk_dir (empty: no disk tier) once parked for
     * disk_idle_us, or sooner when the host ledger needs their RAM; at
     * most disk_budget bytes there (0: what the file system has free). */
    char disk_dir[256];                /* park_disk_dir */
    uint64_t disk_budget;              /* park_disk_budget */
    int64_t disk_idle_us;              /* park_disk_idle_s (600 s) */
    int ngpus;                         /* for park.<gpu> */
    char uuids[GS_SCHED_MAX_GPUS][48]; /* park.<uuid> */
} gs_park_config_t;

void gs_park_policy_config_default(gs_park_config_t *c, int ngpus, const char (*uuids)[48],
                                   uint64_t host_ram);

/* A parking key: park, park.<index|uuid>, park_idle_s, park_host_budget,
 * park_host_reserve, park_host_memory, park_plain, park_swap, park_lock_timeout_s,
 * park_deep_idle_s, park_disk_dir, park_disk_budget, park_disk_idle_s. */
int gs_park_policy_is_key(const char *key);

/* One setting by name (values as gs_sched_set takes them; bytes as a number
 * or a string with a K/M/G/T suffix, binary; "auto").  0, or -1 with a
 * sentence naming the problem in err (nothing changed). */
int gs_park_policy_config_set(gs_park_config_t *c, const char *key, const json_t *value,
                              uint64_t host_ram, char *err, size_t errlen);

/* The settings as {key: value} that gs_park_policy_config_set takes back,
 * and park_host_budget_bytes (the budget in bytes, "auto" or not), which
 * it does not. */
json_t *gs_park_policy_config_json(const gs_park_config_t *c);

/* "12G", 1073741824, "512 MiB" -> bytes, less than 8 EiB (2^63: a JSON
 * integer).  0, or -1. */
int gs_park_policy_parse_bytes(const json_t *v, uint64_t *out);

/* ---- victims ------------------------------------------------------------ */

typedef struct {
    uint64_t bytes;      /* resident on the GPU where room is needed */
    uint64_t host_bytes; /* on all its GPUs: what parking it puts into host RAM */
    int64_t last_active; /* least recently active goes first */
    int idle;            /* no running cell, no grant, no request */
    int settling;        /* no running cell, but a grant not given back yet */
    int switched_out;    /* active but holding nothing, and switching it pays: a
                            time-slice victim (gs_sched_info's switchable) */
    int64_t switch_at;   /* active, not switchable yet: when it will be (0: not by time) */
    int64_t cost_us;     /* its switch cost: time slicing takes an idle session once it has
                            been idle that long, if sooner than idle_us (0: idle_us) */
    int64_t think_us;    /* its usual pause between cells (0: unknown): when longer than its
                            switch cost, time slicing takes it as soon as it is idle */
    int failed;          /* its last park failed: tried after the others */
    int partial;         /* can be parked in part (the swap tier moves segments): it moves
                            only what is still needed, plus part_slack, and is taken before
                            the whole ones (the smallest move makes room) */
    uint64_t part_slack; /* room a partial park leaves besides the need (temporaries) */
} gs_park_cand_t;

typedef enum {
    GS_PICK_OK,    /* victims chosen: park them */
    GS_PICK_WAIT,  /* enough once idle sessions have been idle long enough: *wait_until */
    GS_PICK_NONE,  /* not enough parkable memory */
    GS_PICK_BUDGET /* enough, but the host budget does not allow it */
} gs_park_pick_rc_t;

/* Choose victims for `need` bytes among n candidates (those that can be
 * parked in part first: each moves only what is left to cover, plus its
 * part_slack; its host_bytes still count whole against the budget, the
 * lease it needs): idle ones idle for
 * idle_us (least recently active first; with allow_switched, for time
 * slicing, already once idle for their switch cost if that is shorter),
 * then, with allow_switched, active sessions holding nothing that may be
 * switched out;
 * candidates whose last park failed come after the others.  The chosen
 * set is pruned of victims it does not need.  A victim's host_bytes must
 * fit in budget_left.  picked (n entries) gets 1 for each victim;
 * *wait_until is set for GS_PICK_WAIT (only when that is before
 * deadline): idle sessions become ready at last_active + idle_us, settling
 * ones no sooner than idle_us (at least 100 ms) from now (their release,
 * an event, usually comes first), active ones at switch_at. */
gs_park_pick_rc_t gs_park_policy_choose(const gs_park_cand_t *c, int n, uint64_t need,
                                        int allow_switched, uint64_t budget_left, int64_t now,
                                        int64_t idle_us, int64_t deadline, int *picked,
                                        int64_t *wait_until);

/* ---- tiers --------------------------------------------------------------- */

/* The swap tier keeps a parked process' CUDA context on the GPU (hundreds
 * of MiB) and its memory in pinned host memory that nothing else can use;
 * the checkpoint tier frees both, but a switch costs ten times more.  So a
 * session idle for deep_idle_us goes to the checkpoint tier (the deep
 * tier) when it may (checkpoint_ok: a notebook, or park_plain). */
int gs_park_policy_deep(const gs_park_config_t *c, int64_t idle_for_us, int checkpoint_ok);

/* A session parked on the swap tier for deep_idle_us moves to the deep
 * tier when the GPU has room to bring it back first (free_bytes against
 * its bytes and a margin) and nothing asks for it. */
int gs_park_policy_demote(const gs_park_config_t *c, int64_t parked_for_us, uint64_t bytes,
                          uint64_t free_bytes, uint64_t margin, int wanted, int checkpoint_ok);

/* ---- costs --------------------------------------------------------------- */

/* A measured copy: the rate estimate moves halfway to it (tiny copies,
 * under 1 MiB or 1 ms, say nothing and are ignored). */
void gs_park_policy_rate_update(double *bps, uint64_t bytes, double seconds);

#endif
