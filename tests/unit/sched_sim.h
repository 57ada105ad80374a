/*
 * sched_sim.h - one GPU shared by synthetic notebooks through the broker's
 * scheduler (broker/sched/scheduler.h), on a virtual clock.
 *
 * What is real: gs_sched_* decides every grant and revoke, and parking's
 * victim choice is gs_park_policy_choose (park_policy.h).  What is
 * modelled, with the costs the H200 runs measured (doc/evaluation.md,
 * doc/parking.md):
 *  - the GPU runs the queued work of every process at once, each getting
 *    an equal share (the driver's time slicing between contexts);
 *  - a hook opens its gate on a grant, keeps up to depth_us of work queued
 *    ahead of the GPU, asks (acquire) when a GPU phase meets a closed gate,
 *    drains its queue before it answers a revoke, and gives the grant back
 *    by itself after idle_release_us (or the grant's shorter
 *    idle_release_us) without submissions, checked on a tick; hook <->
 *    broker messages take msg_us each way; an acquire reports the length
 *    of its last GPU phase as the hook reports its bursts;
 *  - the launcher says when a cell starts and ends (cell_msg_us late);
 *  - parking mirrors broker/park/park_poll.c on the swap tier: a parked
 *    session whose cell runs (or that asks) is queued by demand and brought
 *    back when its memory fits, switching out idle sessions and active
 *    ones that hold nothing; copies take bytes / rate + move_fixed_us, and
 *    a switch's two copies overlap; a switch moves only what the session
 *    coming back lacks, plus room for GPU/32, in whole segments (a partial
 *    park), and parking tells the scheduler so (park_rates.c).
 * A notebook runs cells one after the other; each cell is a list of GPU
 * phases (work in microseconds of the GPU alone, ended by a sync) and CPU
 * phases.  Everything is deterministic: same inputs, same results.
 */
#ifndef GS_SCHED_SIM_H
#define GS_SCHED_SIM_H

#include <stdint.h>

#include "scheduler.h"

#define SIM_MAX_NB     32
#define SIM_MAX_PHASES 1024

typedef struct {
    int gpu;    /* 1: GPU work (ended by a sync), 0: CPU time */
    int64_t us; /* work of the GPU alone, or CPU time */
} sim_phase_t;

typedef struct {
    int64_t start; /* virtual time it starts; never before the previous one ended */
    int nphases;
    sim_phase_t ph[SIM_MAX_PHASES];
} sim_cell_t;

/* A notebook's program: fills its cell number `index` (from 0), given when
 * the previous one ended (prev_end) and a deterministic random stream; 0
 * when there is no more. */
typedef int (*sim_program_t)(void *arg, int index, int64_t prev_end, uint64_t *rng,
                             sim_cell_t *out);

typedef struct {
    const char *name;
    uint64_t bytes;   /* its GPU memory */
    int64_t depth_us; /* GPU work its process keeps queued ahead */
    sim_program_t program;
    void *arg;
} sim_nb_spec_t;

typedef struct {
    uint64_t gpu_bytes;      /* the GPU's memory (0: everything fits) */
    int64_t msg_us;          /* hook <-> broker, one way */
    int64_t cell_msg_us;     /* launcher -> broker */
    int64_t idle_release_us; /* the hook's idle release (200 ms) */
    double out_bps, in_bps;  /* parking's copies (the swap tier) */
    int64_t move_fixed_us;   /* each copy's fixed cost */
    int partial;             /* 1: a switch moves only what the session coming back lacks
                                (a partial park, park_victims.c), in seg_bytes */
    uint64_t seg_bytes;      /* the hooks' swap segment (256 MiB) */
    int64_t park_idle_us;    /* park_idle_s */
    gs_sched_config_t cfg;
    int64_t end_us; /* stop then (virtual time from 0) */
    uint64_t seed;  /* the programs' random streams */
    int trace;      /* print every event on stderr */
} sim_params_t;

/* The H200's costs and the broker's defaults; end_us 60 s. */
void sim_params_default(sim_params_t *p);

typedef struct {
    int nb;
    int64_t start, end;
    int64_t solo_us; /* its phases' sum: its latency alone, natively */
    int64_t gpu_us;  /* of which GPU work */
} sim_cell_result_t;

typedef struct {
    int ncells;
    sim_cell_result_t *cells;        /* in the order they ended */
    int64_t gpu_done_us[SIM_MAX_NB]; /* GPU work each notebook got done */
    int64_t finished_at[SIM_MAX_NB]; /* its last cell's end (0: not finished) */
    int parks, unparks, revokes;
    int64_t copy_us; /* time spent copying (parks and unparks, summed) */
    int64_t end_us;  /* when the simulation stopped */
} sim_result_t;

/* Run n notebooks until p->end_us or until every program is over.
 * Returns 0, or -1 when a check failed (a message says which). */
int sim_run(const sim_params_t *p, const sim_nb_spec_t *nbs, int n, sim_result_t *out);
void sim_result_free(sim_result_t *r);

/* ---- helpers for the scenarios ------------------------------------------ */

/* Latencies over solo times of notebook nb's cells (-1: all notebooks),
 * sorted; returns how many (the caller frees *out). */
int sim_slowdowns(const sim_result_t *r, int nb, double **out);
/* The p-quantile (0..1) of sorted values: the value at index p x (n-1),
 * rounded up. */
double sim_quantile(const double *v, int n, double p);
/* Deterministic random numbers: uniform [0, 1), exponential with a mean. */
double sim_uniform(uint64_t *rng);
double sim_exp(uint64_t *rng, double mean);

#endif
