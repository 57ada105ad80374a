/*
 * park_worker.h - the threads that park and unpark, so that a checkpoint of
 * tens of GB (seconds) never freezes the broker's event loop.
 *
 * The loop submits a job (one session: all of its CUDA processes); a worker
 * thread carries it out step by step with the checkpoint API and hands the
 * finished job back: it is queued and an eventfd, polled by the loop with
 * the ROUTER socket, becomes readable.  Jobs of one session never overlap
 * (park_jobs.c submits one at a time per session); jobs of different sessions
 * run on up to `threads` threads at once.
 *
 * Safety, in the worker:
 *  - a step acts only on a process that still exists and is the one the
 *    loop meant: before each step the pid must answer kill(pid, 0) and have
 *    the start time (from /proc/<pid>/stat) recorded when the job was made,
 *    so a pid reused by another program is never touched;
 *  - a park that fails at any step brings every process of the job back
 *    (restore, unlock) and says which step failed;
 *  - bringing back reads each process' state first (idempotent), and
 *    retries restore and unlock a few times before giving up.
 */
#ifndef GS_PARK_WORKER_H
#define GS_PARK_WORKER_H

#include <stdint.h>

#include "park_cuda.h"
#include "sched/scheduler.h" /* GS_SCHED_ID_MAX: a job names its session */

#define GS_PARK_MAX_PIDS 32

typedef struct {
    char uuid[48];
    uint64_t need; /* bytes that must be free there */
} gs_park_room_t;

typedef struct gs_park_job {
    /* set by the submitter */
    uint64_t id;
    int unpark; /* 0: lock + checkpoint; 1: restore + unlock */
    char session[GS_SCHED_ID_MAX];
    int npids;
    int pids[GS_PARK_MAX_PIDS];
    unsigned long long start[GS_PARK_MAX_PIDS]; /* /proc start time; 0 = gone already */
    unsigned lock_timeout_ms;
    /* unpark onto other GPUs (a move): the pairs for the driver; 0: in place */
    int npairs;
    gs_park_gpu_pair_t pairs[GS_PARK_MAX_PAIRS];
    /* unpark: the GPU memory the restore needs, by GPU UUID, in place
     * (room) and for a move (move_room, the target); restored only where
     * it is free (gpu_free.h: a restore that runs out of memory can never
     * be tried again), waiting up to room_wait_ms for it */
    int nroom;
    gs_park_room_t room[GS_PARK_MAX_PAIRS];
    gs_park_room_t move_room;
    unsigned room_wait_ms;
    /* set by the worker */
    int moved;                  /* the move worked: the session runs on the new GPUs */
    char move_refused[300];     /* the driver refused the move (restored in place): why */
    int ok;                     /* every live process reached the goal */
    int stuck;                  /* a process is left locked or checkpointed (not runnable) */
    int gone[GS_PARK_MAX_PIDS]; /* the process was gone (or its pid reused) */
    char error[400];            /* what failed, including steps that succeeded on a retry */
    int64_t elapsed_us;
    struct gs_park_job *next;
} gs_park_job_t;

typedef struct gs_park_worker gs_park_worker_t;

/* Start `threads` threads (1..8) calling api.  NULL on failure. */
gs_park_worker_t *gs_park_worker_new(gs_park_cuda_t *api, int threads);

/* Waits for running jobs, drops queued ones, joins the threads. */
void gs_park_worker_destroy(gs_park_worker_t **self_p);

/* The eventfd to poll for finished jobs. */
int gs_park_worker_fd(const gs_park_worker_t *self);

/* Queue a job (ownership passes to the worker until it comes back). */
void gs_park_worker_submit(gs_park_worker_t *self, gs_park_job_t *job);

/* A finished job (the caller frees it), or NULL; clears the eventfd when
 * there are none left. */
gs_park_job_t *gs_park_worker_done(gs_park_worker_t *self);

/* Run a job on the calling thread (shutdown: bring every parked session
 * back before the broker exits). */
void gs_park_worker_run(gs_park_cuda_t *api, gs_park_job_t *job);

#endif
