/*
 * park_backend.h - what parking needs of the checkpoint API and its worker
 * threads, as a table of functions: the broker's is the driver's API
 * (park_cuda.h) on worker threads (park_worker.h), filled by
 * gs_park_backend_real (park_backend.c); a unit test fills its own and
 * plays the jobs on a virtual clock (tests/unit/test_park_glue.c).
 * Parking above it (park_state.h, park.c, park_jobs.c) calls only this
 * table, never park_cuda.h or park_worker.h.
 */
#ifndef GS_PARK_BACKEND_H
#define GS_PARK_BACKEND_H

#include <stddef.h>

#include "park_worker.h" /* gs_park_job_t, and park_cuda.h's GS_PROC_* */

typedef struct {
    void *arg; /* each call's first argument */
    /* The process' state under the checkpoint API (GS_PROC_*): 0, or -1
     * with err set. */
    int (*proc_state)(void *arg, int pid, int *state, char *err, size_t errlen);
    /* Queue a job: it belongs to the backend until done returns it. */
    void (*submit)(void *arg, gs_park_job_t *job);
    /* A finished job (the caller frees it), or NULL. */
    gs_park_job_t *(*done)(void *arg);
    /* The descriptor to poll for finished jobs, or -1. */
    int (*fd)(void *arg);
    /* Shutdown: waits for the jobs under way and drops the queued ones;
     * after it only run and destroy are called. */
    void (*stop)(void *arg);
    /* Runs a job on the calling thread (shutdown: bring a session back). */
    void (*run)(void *arg, gs_park_job_t *job);
    /* Frees arg (after stop). */
    void (*destroy)(void *arg);
} gs_park_backend_t;

/* The driver's checkpoint API (park_cuda.h) on `threads` worker threads:
 * 0 with *b filled, or -1 with why set ("no NVIDIA driver loaded", "cannot
 * start the park threads", ...). */
int gs_park_backend_real(gs_park_backend_t *b, int threads, char *why, size_t whylen);

#endif
