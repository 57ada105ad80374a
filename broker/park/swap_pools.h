/*
 * swap_pools.h - the swap tier's host memory in the broker: one host pool
 * per GPU (host_pool.h, the decisions) with its driver calls run on a
 * worker thread (pool_driver.h, job_queue.h), and the leases: which
 * process of which user holds which chunks while it is parked, so that the
 * pool socket (pool_socket.h) hands them to that process and nobody else.
 *
 * The event loop owns this object; the only thread it starts does driver
 * calls on one chunk at a time and reports through an eventfd.
 */
#ifndef GS_SWAP_POOLS_H
#define GS_SWAP_POOLS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "host_pool.h"
#include "pool_driver.h"
#include "pool_socket.h"

typedef struct gs_swap_pools gs_swap_pools_t;

typedef struct {
    uint64_t chunk_bytes;      /* 1 GiB by default */
    uint64_t budget_bytes;     /* pinned at most, all GPUs together */
    uint64_t release_after_us; /* unused chunks above the target go back after this */
} gs_swap_pools_config_t;

/* Pools for GPUs 0 .. ngpus-1; NULL with why set when the driver lacks what
 * they need (then parking keeps to the checkpoint tier). */
gs_swap_pools_t *gs_swap_pools_new(int ngpus, const gs_swap_pools_config_t *cfg, char *why,
                                   size_t whylen);
/* Waits for the job under way, then unpins every chunk not lent; chunks
 * still mapped by notebook processes stay valid for them (the driver frees
 * them when the last mapping goes). */
void gs_swap_pools_destroy(gs_swap_pools_t **self_p);

/* The eventfd of finished pinning jobs, for the loop's poll. */
int gs_swap_pools_fd(const gs_swap_pools_t *self);
/* Collects finished jobs and starts the next ones; 1 when a pool changed. */
int gs_swap_pools_poll(gs_swap_pools_t *self, int64_t now_us);
/* When poll wants to run again by itself (INT64_MAX: never). */
int64_t gs_swap_pools_next_deadline(const gs_swap_pools_t *self);

/* What parking may need soon on GPU gpu (what is parked there plus what
 * may be parked next); the pool grows or shrinks towards it. */
void gs_swap_pools_set_target(gs_swap_pools_t *self, int gpu, uint64_t bytes);
void gs_swap_pools_set_budget(gs_swap_pools_t *self, uint64_t bytes);
/* While held, no new driver job starts (the one under way finishes):
 * pinning competes with a notebook's own copies and mappings in the
 * driver (measured: a first park of 56 GiB took 21.7 s instead of 1.7 s
 * while the pool pinned its next 56 GiB), so parks and unparks go first. */
void gs_swap_pools_hold(gs_swap_pools_t *self, int hold, int64_t now);
uint64_t gs_swap_pools_chunk_bytes(const gs_swap_pools_t *self);

/* Lends chunks for `bytes` on GPU gpu to process pid of user uid: the
 * lease id (> 0) and its chunk count, or 0 with *short_bytes set to what
 * is missing (pinned memory not there yet, or waiting to be zeroed). */
uint64_t gs_swap_pools_lease(gs_swap_pools_t *self, int gpu, uid_t uid, pid_t pid, uint64_t bytes,
                             int *chunks, uint64_t *short_bytes);
/* A lease that grows as chunks come back (host_pool.h): for a switch whose
 * incoming session returns its chunks while the outgoing one fills them.
 * The lease id (> 0) with the chunks it will have in *chunks and those it
 * has now in *now, or 0. */
uint64_t gs_swap_pools_lease_growing(gs_swap_pools_t *self, int gpu, uid_t uid, pid_t pid,
                                     uint64_t bytes, int *chunks, int *now);
/* Chunks of GPU gpu's pool user uid could have now. */
int gs_swap_pools_usable(const gs_swap_pools_t *self, int gpu, uid_t uid);
/* Chunks lease `lease` holds now if it is user uid's (else 0). */
int gs_swap_pools_lease_chunks(const gs_swap_pools_t *self, uint64_t lease, uid_t uid);
/* 1 when a lease of `bytes` on GPU gpu that failed now needs only the
 * pool's pinning or zeroing under way (gs_host_pool_coming). */
int gs_swap_pools_coming(const gs_swap_pools_t *self, int gpu, uint64_t bytes);
/* The pool driver's handles of lease `lease`'s chunks in position order,
 * into handles[0 .. max), for the disk tier's copies: their count, with
 * the lease's GPU in *gpu; -1 for an unknown lease, or one that has not
 * all its chunks (growing, or some returned early). */
int gs_swap_pools_lease_handles(const gs_swap_pools_t *self, uint64_t lease, uint64_t *handles,
                                int max, int *gpu);
/* GPU gpu's pool driver (its chunks mapped for the CPU: the disk tier's
 * copies, pool_driver.h); NULL for no such pool.  Borrowed. */
gs_pool_driver_t *gs_swap_pools_driver(gs_swap_pools_t *self, int gpu);
/* The lease's chunks come back; -1 for an unknown lease. */
int gs_swap_pools_return(gs_swap_pools_t *self, uint64_t lease, int64_t now_us);
/* Lent bytes on GPU gpu (all GPUs: gpu < 0). */
uint64_t gs_swap_pools_lent(const gs_swap_pools_t *self, int gpu);

/* The pools' figures on GPU gpu, summed over all GPUs for gpu < 0 (the
 * host ledger counts what is pinned and being pinned). */
void gs_swap_pools_stats(const gs_swap_pools_t *self, int gpu, gs_host_pool_stats_t *out);

/* The pool socket's callback (arg: this object): the chunks of the lease
 * asked for, exported as descriptors, or an early return of some of them,
 * for its own process only. */
int gs_swap_pools_serve(void *arg, const gs_pool_request_t *req, int *fds, int max,
                        uint64_t *chunk_bytes, int *want, char *err, size_t errlen);

/* Per GPU: pinned, lent, free, clean, pinning, target and budget bytes,
 * pin failures; for status.  A new array: the caller owns it (json_decref). */
json_t *gs_swap_pools_status(const gs_swap_pools_t *self);

#endif
