/*
 * sim_engine.c - the execution engine: streams are FIFOs of operations run
 * in order by one worker thread each (started on first use).  Kernels take
 * an engine slot of their device (shared by all processes, see
 * sim_shared.c) and sleep for their duration; copies and sets do the real
 * memory operation; events record the CLOCK_MONOTONIC time at which the
 * worker reaches them.  Waiting is always on sim_g.cv with a predicate.
 *
 * Legacy default-stream semantics are kept: an operation on a context's
 * default stream waits for the work already queued on its blocking
 * streams, and an operation on a blocking stream waits for the work queued
 * on the default stream.  NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD and
 * the _ptsz/_ptds entry points all use that one default stream.
 */
#include "sim_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__thread unsigned long long sim_t_next_kernel_us;
__thread int sim_t_next_kernel_set;
__thread int sim_t_per_thread;

SIM_EXPORT void gpusim_set_next_kernel_us(unsigned long long us)
{
    sim_t_next_kernel_us = us;
    sim_t_next_kernel_set = 1;
}

uint64_t sim_take_kernel_ns(void)
{
    if (sim_t_next_kernel_set) {
        sim_t_next_kernel_set = 0;
        return sim_t_next_kernel_us * 1000ULL;
    }
    return sim_g.cfg.kernel_us * 1000ULL;
}

/* ---- operations ------------------------------------------------------- */

struct sim_op *sim_op_new(int type)
{
    struct sim_op *op = calloc(1, sizeof *op);
    if (op)
        op->type = type;
    return op;
}

void sim_op_free_locked(struct sim_op *op)
{
    switch (op->type) {
    case SIM_OP_KERNEL:
        free(op->u.kernel.name);
        break;
    case SIM_OP_EVENT:
    case SIM_OP_WAIT_EVENT:
        sim_event_unref_locked(op->u.event.ev);
        break;
    case SIM_OP_WAIT_STREAM:
        sim_stream_unref_locked(op->u.wait_stream.s);
        break;
    case SIM_OP_GRAPH:
        sim_graph_exec_unref_locked(op->u.graph.exec);
        break;
    default:
        break;
    }
    free(op);
}

struct sim_op *sim_op_clone_locked(const struct sim_op *op)
{
    struct sim_op *c = malloc(sizeof *c);
    if (!c)
        return NULL;
    *c = *op;
    c->next = NULL;
    switch (op->type) {
    case SIM_OP_KERNEL:
        c->u.kernel.name = strdup(op->u.kernel.name);
        if (!c->u.kernel.name) {
            free(c);
            return NULL;
        }
        break;
    case SIM_OP_EVENT:
    case SIM_OP_WAIT_EVENT:
        op->u.event.ev->refs++;
        break;
    case SIM_OP_WAIT_STREAM:
        op->u.wait_stream.s->refs++;
        break;
    case SIM_OP_GRAPH:
        op->u.graph.exec->refs++;
        break;
    default:
        break;
    }
    return c;
}

void sim_event_unref_locked(struct sim_event *e)
{
    if (--e->refs == 0)
        free(e);
}

/* ---- streams ---------------------------------------------------------- */

static uint64_t next_stream_id = 1;

struct sim_stream *sim_stream_new_locked(struct sim_ctx *ctx, unsigned flags, int priority,
                                         int is_default)
{
    struct sim_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->ctx = ctx;
    s->flags = flags;
    s->priority = priority;
    s->is_default = is_default;
    s->id = next_stream_id++;
    s->refs = 1;
    pthread_cond_init(&s->wake, NULL);
    if (!is_default) {
        if (sim_hmap_put(&sim_g.handles, (uintptr_t)s, SIM_H_STREAM, s) != 0) {
            pthread_cond_destroy(&s->wake);
            free(s);
            return NULL;
        }
        s->next = ctx->streams;
        ctx->streams = s;
    }
    return s;
}

void sim_stream_unref_locked(struct sim_stream *s)
{
    if (--s->refs == 0) {
        pthread_cond_destroy(&s->wake);
        free(s);
    }
}

void sim_stream_destroy_locked(struct sim_stream *s)
{
    if (!s->is_default) {
        for (struct sim_stream **pp = &s->ctx->streams; *pp; pp = &(*pp)->next) {
            if (*pp == s) {
                *pp = s->next;
                break;
            }
        }
        sim_hmap_del(&sim_g.handles, (uintptr_t)s, SIM_H_STREAM);
    }
    if (s->capture) {
        if (s->capture->origin == s)
            sim_capture_abort_locked(s->capture); /* ends it for the joined streams too */
        s->capture = NULL;
    }
    s->destroyed = 1;
    pthread_cond_signal(&s->wake);
    sim_stream_unref_locked(s);
}

CUresult sim_stream_resolve(CUstream h, int per_thread, struct sim_stream **out)
{
    /* the per-thread default stream is the legacy one here; only noted */
    sim_t_per_thread = per_thread;
    if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        struct sim_ctx *c;
        CUresult rc = sim_ctx_get(&c);
        if (rc != CUDA_SUCCESS)
            return rc;
        *out = c->default_stream;
        return CUDA_SUCCESS;
    }
    struct sim_stream *s = sim_hmap_get(&sim_g.handles, (uintptr_t)h, SIM_H_STREAM);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = s;
    return CUDA_SUCCESS;
}

int sim_stream_idle(const struct sim_stream *s)
{
    return s->done_seq == s->enq_seq;
}

static void *worker_main(void *arg)
{
    struct sim_stream *s = arg;
    sim_lock();
    for (;;) {
        while (!s->head && !s->destroyed)
            pthread_cond_wait(&s->wake, &sim_g.mu);
        struct sim_op *op = s->head;
        if (!op)
            break;
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        sim_unlock();
        sim_exec_op(s, op);
        sim_lock();
        s->done_seq++;
        sim_g.pending_ops--;
        sim_op_free_locked(op);
        sim_broadcast();
    }
    s->worker_running = 0;
    sim_stream_unref_locked(s);
    sim_unlock();
    return NULL;
}

static CUresult start_worker_locked(struct sim_stream *s)
{
    if (s->worker_running)
        return CUDA_SUCCESS;
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* signals (Ctrl-C of a notebook) stay with the application's threads */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(&t, &attr, worker_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (r != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->worker_running = 1;
    s->refs++;
    return CUDA_SUCCESS;
}

static void enqueue_locked(struct sim_stream *s, struct sim_op *op)
{
    op->next = NULL;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    s->enq_seq++;
    sim_g.pending_ops++;
    pthread_cond_signal(&s->wake);
}

static void add_wait_stream_locked(struct sim_stream *s, struct sim_stream *t, uint64_t seq)
{
    struct sim_op *op = sim_op_new(SIM_OP_WAIT_STREAM);
    if (!op)
        return;
    op->u.wait_stream.s = t;
    op->u.wait_stream.seq = seq;
    t->refs++;
    enqueue_locked(s, op);
}

CUresult sim_submit_locked(struct sim_stream *s, struct sim_op *op)
{
    if (s->capture) {
        if (s->capture->invalidated) {
            sim_op_free_locked(op);
            return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        }
        return sim_graph_append_locked(s->capture->graph, op);
    }
    CUresult rc = start_worker_locked(s);
    if (rc != CUDA_SUCCESS) {
        sim_op_free_locked(op);
        return rc;
    }
    if (!(s->flags & CU_STREAM_NON_BLOCKING)) {
        struct sim_ctx *c = s->ctx;
        if (s->is_default) {
            for (struct sim_stream *t = c->streams; t; t = t->next)
                if (!(t->flags & CU_STREAM_NON_BLOCKING) && !t->capture && !sim_stream_idle(t))
                    add_wait_stream_locked(s, t, t->enq_seq);
        } else {
            struct sim_stream *d = c->default_stream;
            if (d && !sim_stream_idle(d) && s->dep_default_seq < d->enq_seq) {
                add_wait_stream_locked(s, d, d->enq_seq);
                s->dep_default_seq = d->enq_seq;
            }
        }
    }
    enqueue_locked(s, op);
    return CUDA_SUCCESS;
}

struct seqwait {
    const struct sim_stream *s;
    uint64_t seq;
};

static int seq_done(void *arg)
{
    const struct seqwait *w = arg;
    return w->s->done_seq >= w->seq;
}

CUresult sim_submit_sync_locked(struct sim_stream *s, struct sim_op *op)
{
    if (s->capture) {
        sim_capture_invalidate_locked(s->capture);
        sim_op_free_locked(op);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    CUresult rc = sim_submit_locked(s, op);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct seqwait w = {s, s->enq_seq};
    s->refs++;
    sim_wait_locked(seq_done, &w);
    sim_stream_unref_locked(s);
    return CUDA_SUCCESS;
}

CUresult sim_stream_sync_locked(struct sim_stream *s)
{
    if (s->capture) {
        sim_capture_invalidate_locked(s->capture);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (s->is_default) {
        /* the legacy stream is a barrier: sync = wait for a no-op queued on
         * it, which waits for all prior work of the blocking streams */
        struct sim_op *op = sim_op_new(SIM_OP_NOP);
        if (!op)
            return CUDA_ERROR_OUT_OF_MEMORY;
        return sim_submit_sync_locked(s, op);
    }
    struct seqwait w = {s, s->enq_seq};
    s->refs++;
    sim_wait_locked(seq_done, &w);
    sim_stream_unref_locked(s);
    return CUDA_SUCCESS;
}

/* Waits for the work queued so far on every stream of ctx (NULL: of every
 * context). */
struct snapshot {
    size_t n;
    struct sim_stream **s;
    uint64_t *seq;
};

static int snapshot_done(void *arg)
{
    const struct snapshot *sn = arg;
    for (size_t i = 0; i < sn->n; i++)
        if (sn->s[i]->done_seq < sn->seq[i])
            return 0;
    return 1;
}

static void snapshot_add(struct snapshot *sn, size_t cap, struct sim_stream *s)
{
    if (s && sn->n < cap && !sim_stream_idle(s)) {
        sn->s[sn->n] = s;
        sn->seq[sn->n] = s->enq_seq;
        s->refs++;
        sn->n++;
    }
}

static void wait_streams_locked(struct sim_ctx *only)
{
    size_t cap = 0;
    for (struct sim_ctx *c = sim_g.ctxs; c; c = c->next) {
        if (c->destroyed || (only && c != only))
            continue;
        cap++;
        for (struct sim_stream *s = c->streams; s; s = s->next)
            cap++;
    }
    struct snapshot sn = {0, calloc(cap + 1, sizeof *sn.s), calloc(cap + 1, sizeof *sn.seq)};
    if (!sn.s || !sn.seq) {
        free(sn.s);
        free(sn.seq);
        return;
    }
    for (struct sim_ctx *c = sim_g.ctxs; c; c = c->next) {
        if (c->destroyed || (only && c != only))
            continue;
        snapshot_add(&sn, cap, c->default_stream);
        for (struct sim_stream *s = c->streams; s; s = s->next)
            snapshot_add(&sn, cap, s);
    }
    sim_wait_locked(snapshot_done, &sn);
    for (size_t i = 0; i < sn.n; i++)
        sim_stream_unref_locked(sn.s[i]);
    free(sn.s);
    free(sn.seq);
}

CUresult sim_ctx_sync_locked(struct sim_ctx *c)
{
    CUresult rc = CUDA_SUCCESS;
    for (struct sim_stream *s = c->streams; s; s = s->next) {
        if (s->capture) {
            sim_capture_invalidate_locked(s->capture);
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    if (rc != CUDA_SUCCESS)
        return rc;
    wait_streams_locked(c);
    return CUDA_SUCCESS;
}

void sim_wait_all_idle_locked(void)
{
    wait_streams_locked(NULL);
}

/* ---- execution (worker threads, sim_g.mu not held) -------------------- */

void sim_run_kernel(int dev, const char *name, uint64_t dur_ns, const void *stream)
{
    sim_slot_acquire(dev);
    uint64_t start = sim_now_ns();
    if (dur_ns) {
        uint64_t until = start + dur_ns;
        struct timespec ts = {(time_t)(until / 1000000000ULL), (long)(until % 1000000000ULL)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
    }
    /* the kernel ran [start, start + dur); the worker may wake a little
     * later (the slot is held until then), but the log and the busy
     * counters report the simulated duration exactly */
    uint64_t end = start + dur_ns;
    sim_slot_release(dev, dur_ns);
    atomic_fetch_add(&sim_g.proc_busy_ns[dev], dur_ns);
    sim_log_op(dev, "kernel", name, stream, start, end, -1);
}

static void do_copy(const struct sim_op *op)
{
    for (size_t z = 0; z < op->u.copy.depth; z++)
        for (size_t y = 0; y < op->u.copy.height; y++)
            memmove(op->u.copy.dst + z * op->u.copy.dslice + y * op->u.copy.dpitch,
                    op->u.copy.src + z * op->u.copy.sslice + y * op->u.copy.spitch,
                    op->u.copy.width);
}

static void do_set(const struct sim_op *op)
{
    uint16_t v16 = (uint16_t)op->u.set.value;
    uint32_t v32 = op->u.set.value;
    for (size_t y = 0; y < op->u.set.height; y++) {
        char *row = op->u.set.dst + y * op->u.set.pitch;
        switch (op->u.set.elsize) {
        case 1:
            memset(row, (int)(op->u.set.value & 0xff), op->u.set.width);
            break;
        case 2:
            for (size_t i = 0; i < op->u.set.width; i++)
                memcpy(row + 2 * i, &v16, 2);
            break;
        default:
            for (size_t i = 0; i < op->u.set.width; i++)
                memcpy(row + 4 * i, &v32, 4);
            break;
        }
    }
}

void sim_exec_op(struct sim_stream *s, struct sim_op *op)
{
    int dev = s->ctx->dev;
    uint64_t t0;
    switch (op->type) {
    case SIM_OP_KERNEL:
        sim_run_kernel(dev, op->u.kernel.name, op->u.kernel.dur_ns, s);
        break;
    case SIM_OP_COPY:
        t0 = sim_now_ns();
        do_copy(op);
        sim_log_op(dev, "memcpy", op->u.copy.kind, s, t0, sim_now_ns(),
                   (long long)(op->u.copy.width * op->u.copy.height * op->u.copy.depth));
        break;
    case SIM_OP_SET:
        t0 = sim_now_ns();
        do_set(op);
        sim_log_op(dev, "memset",
                   op->u.set.elsize == 1   ? "D8"
                   : op->u.set.elsize == 2 ? "D16"
                                           : "D32",
                   s, t0, sim_now_ns(),
                   (long long)(op->u.set.width * (size_t)op->u.set.elsize * op->u.set.height));
        break;
    case SIM_OP_HOSTFN:
        t0 = sim_now_ns();
        op->u.hostfn.fn(op->u.hostfn.arg);
        sim_log_op(dev, "host_func", "host function", s, t0, sim_now_ns(), -1);
        break;
    case SIM_OP_CALLBACK:
        t0 = sim_now_ns();
        op->u.callback.fn(op->u.callback.handle, CUDA_SUCCESS, op->u.callback.arg);
        sim_log_op(dev, "host_func", "stream callback", s, t0, sim_now_ns(), -1);
        break;
    case SIM_OP_EVENT:
        sim_lock();
        op->u.event.ev->time_ns = sim_now_ns();
        if (op->u.event.gen == 0) /* a node of a captured graph */
            op->u.event.ev->done_gen = op->u.event.ev->record_gen;
        else if (op->u.event.ev->done_gen < op->u.event.gen)
            op->u.event.ev->done_gen = op->u.event.gen;
        sim_broadcast();
        sim_unlock();
        break;
    case SIM_OP_WAIT_EVENT:
        sim_lock();
        while (op->u.event.ev->done_gen < op->u.event.gen)
            sim_cond_wait();
        sim_unlock();
        break;
    case SIM_OP_WAIT_STREAM:
        sim_lock();
        while (op->u.wait_stream.s->done_seq < op->u.wait_stream.seq)
            sim_cond_wait();
        sim_unlock();
        break;
    case SIM_OP_FREE:
        sim_lock();
        sim_mem_release_locked(op->u.free.a);
        sim_unlock();
        break;
    case SIM_OP_GRAPH:
        sim_graph_run(s, op->u.graph.exec);
        break;
    default:
        break;
    }
}
