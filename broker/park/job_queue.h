/*
 * job_queue.h - worker threads for the broker's slow jobs (pinning host
 * memory, zeroing it: seconds per call), so that the event loop never
 * waits: the loop submits a job, a thread runs it, and the finished job
 * comes back through a queue whose eventfd the loop polls with its sockets.
 *
 * A job is any struct whose first member is a gs_job_t; `run` does the
 * work on a worker thread and must not touch the loop's state.  Workers
 * take no signals (the loop's signalfd gets them all).
 */
#ifndef GS_JOB_QUEUE_H
#define GS_JOB_QUEUE_H

typedef struct gs_job {
    void (*run)(struct gs_job *job);
    struct gs_job *next; /* the queue's */
} gs_job_t;

typedef struct gs_job_queue gs_job_queue_t;

/* `threads` workers (1..8); NULL on failure. */
gs_job_queue_t *gs_job_queue_new(int threads);
/* Waits for running jobs, then frees the queue; jobs still queued or
 * finished and not collected are handed to `drop` (may be NULL). */
void gs_job_queue_destroy(gs_job_queue_t **self_p, void (*drop)(gs_job_t *job));

/* The eventfd that is readable while finished jobs wait. */
int gs_job_queue_fd(const gs_job_queue_t *self);
/* Queue a job; it belongs to the queue until gs_job_queue_done returns it. */
void gs_job_queue_submit(gs_job_queue_t *self, gs_job_t *job);
/* A finished job, or NULL (then the eventfd is cleared). */
gs_job_t *gs_job_queue_done(gs_job_queue_t *self);

#endif
