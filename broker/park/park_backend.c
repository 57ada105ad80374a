/*
 * park_backend.c - the broker's backend of parking (park_backend.h): the
 * driver's checkpoint API (park_cuda.c) and the worker threads that call it
 * (park_worker.c).
 */
#include <stdio.h>
#include <stdlib.h>

#include "park_backend.h"

typedef struct {
    gs_park_cuda_t *api;
    gs_park_worker_t *worker; /* NULL once stopped */
} real_t;

static int real_state(void *arg, int pid, int *state, char *err, size_t errlen)
{
    return gs_park_cuda_state(((real_t *)arg)->api, pid, state, err, errlen);
}

static void real_submit(void *arg, gs_park_job_t *job)
{
    gs_park_worker_submit(((real_t *)arg)->worker, job);
}

static gs_park_job_t *real_done(void *arg)
{
    real_t *r = arg;
    return r->worker ? gs_park_worker_done(r->worker) : NULL;
}

static int real_fd(void *arg)
{
    real_t *r = arg;
    return r->worker ? gs_park_worker_fd(r->worker) : -1;
}

static void real_stop(void *arg)
{
    gs_park_worker_destroy(&((real_t *)arg)->worker);
}

static void real_run(void *arg, gs_park_job_t *job)
{
    gs_park_worker_run(((real_t *)arg)->api, job);
}

static void real_destroy(void *arg)
{
    real_t *r = arg;
    gs_park_worker_destroy(&r->worker);
    gs_park_cuda_free(&r->api);
    free(r);
}

int gs_park_backend_real(gs_park_backend_t *b, int threads, char *why, size_t whylen)
{
    real_t *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    r->api = gs_park_cuda_load(why, whylen);
    if (r->api) {
        r->worker = gs_park_worker_new(r->api, threads);
        if (!r->worker) {
            snprintf(why, whylen, "cannot start the park threads");
            gs_park_cuda_free(&r->api);
        }
    }
    if (!r->api) {
        free(r);
        return -1;
    }
    *b = (gs_park_backend_t){.arg = r,
                             .proc_state = real_state,
                             .submit = real_submit,
                             .done = real_done,
                             .fd = real_fd,
                             .stop = real_stop,
                             .run = real_run,
                             .destroy = real_destroy};
    return 0;
}
