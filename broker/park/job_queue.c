/*
 * job_queue.c - worker threads and two FIFO lists under one mutex (see
 * job_queue.h).
 */
#include "job_queue.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "gs_assert.h"

#define MAX_THREADS 8

struct list {
    gs_job_t *head, *tail;
};

struct gs_job_queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct list todo, done;
    int stop;
    int efd;
    int nthreads;
    pthread_t threads[MAX_THREADS];
};

static void push(struct list *l, gs_job_t *j)
{
    j->next = NULL;
    if (l->tail)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
}

static gs_job_t *pop(struct list *l)
{
    gs_job_t *j = l->head;
    if (j) {
        l->head = j->next;
        if (!l->head)
            l->tail = NULL;
        j->next = NULL;
    }
    return j;
}

static void *thread_main(void *arg)
{
    gs_job_queue_t *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->todo.head && !q->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->stop)
            break;
        gs_job_t *j = pop(&q->todo);
        pthread_mutex_unlock(&q->mu);
        j->run(j);
        pthread_mutex_lock(&q->mu);
        push(&q->done, j);
        uint64_t one = 1;
        if (write(q->efd, &one, sizeof one) < 0) {
            /* cannot overflow: one write per job */
        }
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

gs_job_queue_t *gs_job_queue_new(int threads)
{
    gs_job_queue_t *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (q->efd < 0) {
        free(q);
        return NULL;
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < threads; i++)
        if (pthread_create(&q->threads[q->nthreads], NULL, thread_main, q) == 0)
            q->nthreads++;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!q->nthreads) {
        gs_job_queue_destroy(&q, NULL);
        return NULL;
    }
    return q;
}

void gs_job_queue_destroy(gs_job_queue_t **self_p, void (*drop)(gs_job_t *job))
{
    gs_job_queue_t *q = self_p ? *self_p : NULL;
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < q->nthreads; i++)
        pthread_join(q->threads[i], NULL);
    gs_job_t *j;
    while ((j = pop(&q->todo)) || (j = pop(&q->done)))
        if (drop)
            drop(j);
    close(q->efd);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
    *self_p = NULL;
}

int gs_job_queue_fd(const gs_job_queue_t *q)
{
    return q->efd;
}

void gs_job_queue_submit(gs_job_queue_t *q, gs_job_t *j)
{
    GS_ASSERT(j && j->run);
    pthread_mutex_lock(&q->mu);
    push(&q->todo, j);
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

gs_job_t *gs_job_queue_done(gs_job_queue_t *q)
{
    pthread_mutex_lock(&q->mu);
    gs_job_t *j = pop(&q->done);
    if (!j) {
        uint64_t v;
        while (read(q->efd, &v, sizeof v) > 0) {
        }
    }
    pthread_mutex_unlock(&q->mu);
    return j;
}
