/*
 * load.h - the broker's load test (doc/load-test.md): many simulated hooks
 * in one process, each on a DEALER socket of its own speaking the real
 * protocol (hello, join, memory, then acquire -> grant -> hold -> release
 * in a loop, heartbeats, revokes answered), for a bounded time, while the
 * broker's memory is sampled from /proc.
 *
 *   load_storm.c    main: options, the JSON report
 *   load_control.c  the phases (connect, warm-up, measure, drain), the
 *                   broker's RSS and CPU time, its status afterwards
 *   load_worker.c   one thread polling a slice of the clients
 *   load_client.c   one client's state machine
 *   load_stats.c    the latency histogram and the counters
 */
#ifndef GS_LOAD_H
#define GS_LOAD_H

#include <czmq.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "protocol.h"

/* ---- options ------------------------------------------------------------- */

typedef struct {
    const char *endpoint;
    int clients, sessions, threads;
    double measure_s;    /* the measured phase */
    double warmup_s;     /* the warm-up lasts at least this ... */
    int warmup_grants;   /* ... and until every client was granted this often ... */
    double warmup_max_s; /* ... or this long at most */
    double drain_s;      /* the most the clients wait for their last grant */
    int64_t hold_us;     /* a grant is held 0..hold_us (uniform) */
    int64_t think_us;    /* then 0..think_us before the next acquire */
    uint64_t memory;     /* each client's memory report, bytes (0: none) */
    long broker_pid;     /* whose RSS and CPU time to sample (0: none) */
    double sample_s;     /* RSS sampling interval */
    unsigned seed;
    char gpu[64];    /* the UUID of the broker's GPU 0 (from its status) */
    char policy[16]; /* the broker's policy then */
} load_config_t;

/* ---- statistics (load_stats.c) ---------------------------------------------- */

/* Log-linear buckets over microseconds: exact below 128, then 64 per
 * power of two, so that a percentile is within 1.6 % of the true value
 * whatever the range (a grant may take 30 us or 3 s), in a fixed 21 KiB
 * per thread.  Values of 2^46 us and more count as the last bucket. */
#define LOAD_HIST_SUB     64
#define LOAD_HIST_BUCKETS (2 * LOAD_HIST_SUB + LOAD_HIST_SUB * 40)

typedef struct {
    uint64_t counts[LOAD_HIST_BUCKETS];
    uint64_t n;
    int64_t max;
    double sum;
} load_hist_t;

void load_hist_add(load_hist_t *h, int64_t us);
void load_hist_merge(load_hist_t *dst, const load_hist_t *src);
/* The smallest value at or above fraction q of the samples (0 when empty;
 * the bucket's upper bound, never above max). */
int64_t load_hist_quantile(const load_hist_t *h, double q);

#define LOAD_MAX_CODES 8

/* What one worker saw; merged at the end. */
typedef struct {
    uint64_t sent[GS_MSG_COUNT], received[GS_MSG_COUNT];
    uint64_t measured_msgs; /* sent and received in the measured phase */
    uint64_t grants, grants_measured, revokes, releases;
    uint64_t stale;     /* a grant of another epoch, or for nothing asked */
    uint64_t bad_frame; /* a frame that failed validation */
    uint64_t errors;
    struct {
        char code[32];
        uint64_t n;
    } codes[LOAD_MAX_CODES];
    char first_error[300];
    load_hist_t latency; /* acquire -> grant, measured phase only */
} load_counters_t;

void load_counters_error(load_counters_t *c, const char *code, const char *text);
void load_counters_merge(load_counters_t *dst, const load_counters_t *src);
uint64_t load_counters_total(const uint64_t *by_type);

/* ---- phases, shared by the controller and the workers ------------------------ */

typedef enum {
    LOAD_CONNECT, /* hello and join */
    LOAD_WARMUP,  /* the storm, not measured */
    LOAD_MEASURE, /* the storm, latencies recorded */
    LOAD_DRAIN,   /* no new acquire: the last grants, then leave */
    LOAD_STOP     /* the drain's time is up: leave now */
} load_phase_t;

typedef struct {
    const load_config_t *cfg;
    atomic_int phase;
    atomic_int joined; /* clients past their join */
    atomic_int done;   /* clients that left */
    atomic_int failed; /* a worker could not go on */
    atomic_int warmed; /* clients granted warmup_grants times */
} load_shared_t;

/* ---- one client (load_client.c) ------------------------------------------------ */

typedef enum { LC_HELLO, LC_JOIN, LC_IDLE, LC_WAITING, LC_HOLDING, LC_DONE } load_cstate_t;

typedef struct {
    zsock_t *sock;
    int index;
    char session[32];
    load_cstate_t st;
    long long seq, acquire_seq, epoch;
    long long grant_id, last_grant_id;
    int measured;       /* the pending acquire was sent in the measured phase */
    int64_t asked_at;   /* when the pending acquire was sent */
    int64_t granted_at; /* when the grant held came */
    int64_t due;        /* hold or think over, or the join's timeout */
    int64_t heartbeat_at, heartbeat_us;
    uint64_t grants;
    unsigned rng;
} load_client_t;

/* Connects and sends hello; -1 without a socket. */
int load_client_open(load_client_t *c, const load_config_t *cfg, int index);
void load_client_close(load_client_t *c);
/* Everything queued on the socket; counts what it saw into k. */
void load_client_read(load_client_t *c, load_shared_t *sh, load_counters_t *k, int64_t now);
/* Timers: the hold or think time is over, a heartbeat is due, the phase
 * changed.  Returns when it wants to be called again. */
int64_t load_client_tick(load_client_t *c, load_shared_t *sh, load_counters_t *k, int64_t now);

/* ---- workers (load_worker.c) ---------------------------------------------------- */

typedef struct {
    load_shared_t *sh;
    load_client_t *clients;
    int n;
    load_counters_t counters;
    pthread_t thread;
} load_worker_t;

int load_worker_start(load_worker_t *w);
void load_worker_join(load_worker_t *w);

/* ---- the controller (load_control.c) ---------------------------------------------- */

typedef struct {
    int64_t t_us; /* since the storm's start */
    long rss_kib;
    double cpu_s; /* the broker's user + system time */
} load_sample_t;

typedef struct {
    double connect_s, warmup_s, storm_s, drain_s, measured_s;
    int warmup_complete; /* every client reached warmup_grants in time */
    long rss_start_kib, rss_connected_kib, rss_warm_kib, rss_end_kib, rss_left_kib;
    long rss_max_measured_kib;
    double cpu_measured_s; /* the broker's CPU time in the measured phase */
    load_sample_t *samples;
    int nsamples, capsamples;
    /* the broker after the clients left (its status) */
    int after_ok;
    int after_sessions, after_holders, after_waiting;
    long long after_open_connections;
} load_result_t;

/* Runs the whole storm with the workers; 0, or -1 with a sentence on stderr. */
int load_control_run(load_shared_t *sh, load_worker_t *workers, int nworkers, load_result_t *r);
/* The broker's GPU 0 UUID into cfg->gpu (a `status` as the CLI asks it). */
int load_control_find_gpu(load_config_t *cfg);
long load_rss_kib(long pid);
double load_cpu_s(long pid);

static inline int64_t load_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif
