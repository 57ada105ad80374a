/*
 * park_worker.c - park/unpark jobs on worker threads (see park_worker.h).
 */
#include "park_worker.h"

#include "gpu_free.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "proc_alive.h"

#define MAX_THREADS 8
#define TRIES       4 /* restore/unlock attempts when bringing a process back */

struct gs_park_worker {
    gs_park_cuda_t *api;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    gs_park_job_t *todo, *todo_tail, *done, *done_tail;
    int stop;
    int efd;
    int nthreads;
    pthread_t threads[MAX_THREADS];
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The job's process i still exists and is the same process. */
static int same_process(gs_park_job_t *j, int i)
{
    if (j->gone[i] || !j->start[i])
        return 0;
    if (kill((pid_t)j->pids[i], 0) != 0 && errno == ESRCH)
        return 0;
    return gs_proc_start(j->pids[i]) == j->start[i];
}

static void note(gs_park_job_t *j, const char *fmt, int pid, const char *text)
{
    size_t len = strlen(j->error);
    if (len + 4 >= sizeof j->error)
        return;
    snprintf(j->error + len, sizeof j->error - len, "%s", len ? "; " : "");
    len = strlen(j->error);
    snprintf(j->error + len, sizeof j->error - len, fmt, pid, text);
}

static void nap_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Bring process i back to RUNNING whatever state it is in: restore if
 * checkpointed, unlock if locked; a few tries each.  1 when it runs. */
static int bring_back(gs_park_cuda_t *api, gs_park_job_t *j, int i)
{
    char err[200];
    for (int attempt = 0; attempt < 2 * TRIES; attempt++) {
        if (!same_process(j, i)) {
            j->gone[i] = 1;
            return 1; /* nothing to bring back */
        }
        int st = -1;
        if (gs_park_cuda_state(api, j->pids[i], &st, err, sizeof err) != 0) {
            note(j, "pid %d: %s", j->pids[i], err);
            nap_ms(20 << (attempt < 4 ? attempt : 4));
            continue;
        }
        int rc = 0;
        if (st == GS_PROC_RUNNING)
            return 1;
        if (st == GS_PROC_CHECKPOINTED)
            rc = gs_park_cuda_restore(api, j->pids[i], err, sizeof err);
        else if (st == GS_PROC_LOCKED)
            rc = gs_park_cuda_unlock(api, j->pids[i], err, sizeof err);
        else {
            note(j, "pid %d: %s", j->pids[i], "the driver reports the process FAILED");
            return 0;
        }
        if (rc != 0) {
            note(j, "pid %d: %s", j->pids[i], err);
            nap_ms(20 << (attempt < 4 ? attempt : 4));
        }
    }
    return 0;
}

static void run_park(gs_park_cuda_t *api, gs_park_job_t *j)
{
    char err[200];
    int failed = 0, live = 0;
    /* Lock every process first: none runs while another is checkpointed. */
    for (int i = 0; i < j->npids && !failed; i++) {
        if (!same_process(j, i)) {
            j->gone[i] = 1;
            continue;
        }
        if (gs_park_cuda_lock(api, j->pids[i], j->lock_timeout_ms, err, sizeof err) != 0) {
            note(j, "lock pid %d: %s", j->pids[i], err);
            failed = 1;
        }
        live++;
    }
    for (int i = 0; i < j->npids && !failed; i++) {
        if (!same_process(j, i)) {
            j->gone[i] = 1;
            continue;
        }
        if (gs_park_cuda_checkpoint(api, j->pids[i], err, sizeof err) != 0) {
            note(j, "checkpoint pid %d: %s", j->pids[i], err);
            failed = 1;
        }
    }
    if (!failed && live == 0) {
        snprintf(j->error, sizeof j->error, "its processes are gone");
        failed = 1;
    }
    if (!failed) {
        j->ok = 1;
        return;
    }
    /* Roll back: every process runs again, as it was. */
    for (int i = 0; i < j->npids; i++)
        if (!j->gone[i] && !bring_back(api, j, i))
            j->stuck = 1;
}

/* A move: the first process onto the new GPUs; where the driver refuses,
 * every process is restored in place (bring_back) and the refusal is said.
 * Only one-process sessions are moved (park_move.c), so no session is
 * ever split between GPUs. */
static void try_move(gs_park_cuda_t *api, gs_park_job_t *j)
{
    char err[200];
    int st = -1;
    if (j->npairs == 0 || j->npids < 1 || j->gone[0] || !same_process(j, 0) ||
        gs_park_cuda_state(api, j->pids[0], &st, err, sizeof err) != 0 ||
        st != GS_PROC_CHECKPOINTED)
        return;
    if (gs_park_cuda_restore_onto(api, j->pids[0], j->pairs, j->npairs, err, sizeof err) == 0)
        j->moved = 1;
    else
        snprintf(j->move_refused, sizeof j->move_refused, "%s", err);
}

/* Whether every GPU of the job has the room its restore needs, by the
 * driver's count; waits up to room_wait_ms for it (an exiting process'
 * memory comes free a moment after its pid is gone).  1: restore.  0: not
 * now, with why in the job's error (which names OUT_OF_MEMORY, so that the
 * next try asks for room for more: park_jobs.c). */
static int room_ready(const gs_park_room_t *room, int n, unsigned wait_ms, char *why, size_t len)
{
    int64_t until = now_us() + (int64_t)wait_ms * 1000;
    for (int waited = 0;; waited++) {
        int short_on = -1;
        uint64_t free_b = 0, total = 0;
        for (int k = 0; k < n && short_on < 0; k++)
            if (gs_gpu_free_read(room[k].uuid, &free_b, &total) == 0 && free_b < room[k].need)
                short_on = k;
        if (short_on < 0)
            return 1; /* room, or nothing known: the driver decides */
        if (now_us() >= until) {
            snprintf(why, len,
                     "not restored yet: %s has %.1f GiB free, the restore needs %.1f GiB (a "
                     "restore that meets CUDA_ERROR_OUT_OF_MEMORY can never be tried again)",
                     room[short_on].uuid, (double)free_b / (1 << 30),
                     (double)room[short_on].need / (1 << 30));
            return 0;
        }
        nap_ms(waited < 10 ? 20 : 100);
    }
}

static void run_unpark(gs_park_cuda_t *api, gs_park_job_t *j)
{
    /* A move only into room on its target; else it is restored in place. */
    if (j->npairs && j->move_room.uuid[0] &&
        !room_ready(&j->move_room, 1, 0, j->move_refused, sizeof j->move_refused))
        j->npairs = 0;
    try_move(api, j);
    if (!j->moved && !room_ready(j->room, j->nroom, j->room_wait_ms, j->error, sizeof j->error)) {
        j->ok = 0;
        j->stuck = 1; /* still checkpointed, and intact */
        return;
    }
    j->ok = 1;
    for (int i = 0; i < j->npids; i++)
        if (!j->gone[i] && !bring_back(api, j, i)) {
            j->ok = 0;
            j->stuck = 1;
        }
}

void gs_park_worker_run(gs_park_cuda_t *api, gs_park_job_t *j)
{
    int64_t t0 = now_us();
    j->ok = j->stuck = j->moved = 0;
    j->error[0] = j->move_refused[0] = '\0';
    for (int i = 0; i < j->npids; i++)
        j->gone[i] = j->start[i] == 0;
    if (j->unpark)
        run_unpark(api, j);
    else
        run_park(api, j);
    j->elapsed_us = now_us() - t0;
}

static void *thread_main(void *arg)
{
    gs_park_worker_t *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->todo && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->stop)
            break;
        gs_park_job_t *j = w->todo;
        w->todo = j->next;
        if (!w->todo)
            w->todo_tail = NULL;
        j->next = NULL;
        pthread_mutex_unlock(&w->mu);
        gs_park_worker_run(w->api, j);
        pthread_mutex_lock(&w->mu);
        if (w->done_tail)
            w->done_tail->next = j;
        else
            w->done = j;
        w->done_tail = j;
        uint64_t one = 1;
        if (write(w->efd, &one, sizeof one) < 0) {
            /* the counter cannot overflow with one write per job */
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

gs_park_worker_t *gs_park_worker_new(gs_park_cuda_t *api, int threads)
{
    gs_park_worker_t *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->api = api;
    w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->efd < 0) {
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (threads < 1)
        threads = 1;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    /* Workers take no signals: the loop's signalfd gets them all. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < threads; i++)
        if (pthread_create(&w->threads[w->nthreads], NULL, thread_main, w) == 0)
            w->nthreads++;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!w->nthreads) {
        gs_park_worker_destroy(&w);
        return NULL;
    }
    return w;
}

static void free_list(gs_park_job_t *j)
{
    while (j) {
        gs_park_job_t *next = j->next;
        free(j);
        j = next;
    }
}

void gs_park_worker_destroy(gs_park_worker_t **self_p)
{
    gs_park_worker_t *w = *self_p;
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < w->nthreads; i++)
        pthread_join(w->threads[i], NULL);
    free_list(w->todo);
    free_list(w->done);
    close(w->efd);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
    *self_p = NULL;
}

int gs_park_worker_fd(const gs_park_worker_t *w)
{
    return w->efd;
}

void gs_park_worker_submit(gs_park_worker_t *w, gs_park_job_t *j)
{
    j->next = NULL;
    pthread_mutex_lock(&w->mu);
    if (w->todo_tail)
        w->todo_tail->next = j;
    else
        w->todo = j;
    w->todo_tail = j;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

gs_park_job_t *gs_park_worker_done(gs_park_worker_t *w)
{
    pthread_mutex_lock(&w->mu);
    gs_park_job_t *j = w->done;
    if (j) {
        w->done = j->next;
        if (!w->done)
            w->done_tail = NULL;
        j->next = NULL;
    } else {
        uint64_t v;
        while (read(w->efd, &v, sizeof v) > 0) {
        }
    }
    pthread_mutex_unlock(&w->mu);
    return j;
}
