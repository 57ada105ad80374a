/*
 * host_pool.h - the host memory that parked GPU memory is copied into, for
 * one GPU: pinned once, ahead of need, in chunks, and lent to a session
 * while it is parked (doc/parking.md, "the swap tier").
 *
 * Pinning is the slow part of parking at the speed of the link (host
 * cuMemCreate: ~0.2 s per GiB on the H200), so it never happens during a
 * park: the pool grows in the background towards a target the broker sets
 * (what is parked plus what may be parked next), within the host budget,
 * and gives chunks that stayed unused for a while back to the system,
 * since pinned memory is memory the notebooks' own processes cannot use.
 * A chunk that held one user's data is zeroed before another user gets it.
 *
 * This object is pure logic on a caller-supplied clock, like the
 * scheduler: it keeps each chunk's state and decides what to pin, unpin
 * and zero and which chunks a lease gets.  The driver calls themselves
 * run on a worker (pool_pinner.h), which takes one job at a time from
 * gs_host_pool_next_job and reports it with gs_host_pool_job_done.
 */
#ifndef GS_HOST_POOL_H
#define GS_HOST_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct gs_host_pool gs_host_pool_t;

typedef struct {
    uint64_t chunk_bytes;      /* the unit of pinning and lending */
    uint64_t budget_bytes;     /* never more pinned than this */
    uint64_t release_after_us; /* a chunk free this long above the target is unpinned */
    uint64_t retry_after_us;   /* after a failed pin, the next try waits this long */
} gs_host_pool_config_t;

typedef enum {
    GS_POOL_JOB_PIN = 1, /* create and pin chunk `chunk` */
    GS_POOL_JOB_ZERO,    /* overwrite chunk `chunk` with zeros */
    GS_POOL_JOB_UNPIN,   /* give chunk `chunk` back to the system */
} gs_pool_job_kind_t;

typedef struct {
    gs_pool_job_kind_t kind;
    int chunk;
} gs_pool_job_t;

/* Who wrote a chunk last; a chunk of nobody's is clean. */
#define GS_POOL_NOBODY UINT32_MAX

typedef struct {
    uint64_t chunk_bytes;
    uint64_t budget_bytes;
    uint64_t target_bytes;  /* what the broker asked to have pinned */
    uint64_t pinned_bytes;  /* pinned now (free, zeroing or lent) */
    uint64_t lent_bytes;    /* in sessions' hands */
    uint64_t free_bytes;    /* pinned and not lent (clean or waiting to be zeroed) */
    uint64_t clean_bytes;   /* free and zeroed (or never used) */
    uint64_t pinning_bytes; /* being pinned now */
    uint64_t pin_failures;  /* since the start */
    int leases;             /* leases out */
} gs_host_pool_stats_t;

/* NULL on a bad configuration (chunk_bytes 0) or without memory. */
gs_host_pool_t *gs_host_pool_new(const gs_host_pool_config_t *cfg);
void gs_host_pool_destroy(gs_host_pool_t **self_p);

/* What parking may need soon, in bytes: the pool grows towards it (rounded
 * up to whole chunks, at most the budget) and shrinks towards it. */
void gs_host_pool_set_target(gs_host_pool_t *self, uint64_t bytes);
/* A new budget; free chunks above it are unpinned without waiting. */
void gs_host_pool_set_budget(gs_host_pool_t *self, uint64_t bytes);

/* The next driver job at time now_us, if any (1) ; the chunk is busy until
 * gs_host_pool_job_done.  Pinning towards the target comes first, then
 * zeroing, then unpinning what stayed unused. */
int gs_host_pool_next_job(gs_host_pool_t *self, uint64_t now_us, gs_pool_job_t *job);
void gs_host_pool_job_done(gs_host_pool_t *self, const gs_pool_job_t *job, int ok, uint64_t now_us);

/* Lends enough chunks for `bytes` to user `uid`, all or nothing: chunks
 * that are clean or were last written by the same user.  Returns the lease
 * id (> 0) and fills chunks[0 .. *n) in order (at most max), or 0 when
 * there are not enough (then *n is how many more chunks it would need). */
uint64_t gs_host_pool_lease(gs_host_pool_t *self, uint32_t uid, uint64_t bytes, int *chunks,
                            int max, int *n);
/* A lease that grows (the switch's relay, doc/parking.md): lends what
 * user uid may have now (*n_now chunks, maybe none) and takes more as
 * chunks become usable for it (returned, pinned, zeroed), before any new
 * lease, until it holds enough for `bytes`.  Its chunks are positions
 * 0, 1, ... in the order they came.  The lease id, or 0 without memory. */
uint64_t gs_host_pool_lease_growing(gs_host_pool_t *self, uint32_t uid, uint64_t bytes, int *n_now);
/* Chunks user uid could have now without waiting (free and clean, or its
 * own). */
int gs_host_pool_usable(const gs_host_pool_t *self, uint32_t uid);
/* Some chunks of a lease come back before the rest (positions in it; they
 * read -1 from then on): the session coming back in a switch has copied
 * them back already.  All or none: -1 for an unknown lease or position. */
int gs_host_pool_return_some(gs_host_pool_t *self, uint64_t lease, const int *positions, int count,
                             uint64_t now_us);
/* The lease's chunks come back (after an unpark, or from a process that
 * died); they are zeroed before another user gets them.  0, or -1 for an
 * unknown lease. */
int gs_host_pool_return(gs_host_pool_t *self, uint64_t lease, uint64_t now_us);
/* The chunks of a lease (NULL for an unknown one), their count in *n
 * (positions filled so far; -1 for one returned early). */
const int *gs_host_pool_lease_chunks(const gs_host_pool_t *self, uint64_t lease, int *n);
/* How many positions the lease will have in all (0: unknown lease). */
int gs_host_pool_lease_want(const gs_host_pool_t *self, uint64_t lease);

/* 1 when a lease of `bytes` that failed now will succeed once the pool
 * has done what it is doing (pinning towards its target, zeroing), with
 * no other event: the target covers it besides what is lent, and pinning
 * has not been failing.  A park waits for that rather than going deep. */
int gs_host_pool_coming(const gs_host_pool_t *self, uint64_t bytes);

void gs_host_pool_stats(const gs_host_pool_t *self, gs_host_pool_stats_t *out);
/* When next_job may have something new without any other event (a chunk's
 * idle time runs out, a pin may be retried); UINT64_MAX: never. */
uint64_t gs_host_pool_next_deadline(const gs_host_pool_t *self);

#endif
