/*
 * swap_move.c - moving a device's ranges between the GPU and the host
 * window, batch by batch (gs_swap_move and its wrappers, swap_engine.h);
 * the engine's insides are swap_state.h's.
 *
 * A move runs in batches of about batch_bytes: the copies of a batch are
 * spread over the streams of the range's context, an event per stream
 * marks the batch's end, and while the next batch is being copied the
 * previous one is finished (swap out: its physical memory released; swap
 * in: its ranges counted resident).  Two batches are in flight at most, so
 * two sets of events per context suffice.
 */
#define _GNU_SOURCE
#include "swap_engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "swap_state.h"

/* One segment of one range: the unit of a move. */
struct unit {
    size_t range; /* index into the move's range array */
    int seg;
    int made; /* swap in: its physical memory was made by this move */
};

/* Copies one segment between the device and its place in window w, in
 * pieces that never cross one of the window's chunks, over the lane's
 * streams. */
static CUresult copy_seg(gs_swap_engine_t *e, struct lane *l, const gs_swap_range_t *r, int k,
                         const gs_swap_window_t *w, int out, int *next_stream)
{
    size_t done = 0, len = gs_swap_seg_len(r, k), base = gs_swap_seg_off(r, k);
    while (done < len) {
        uint64_t host = r->host_off + base + done;
        size_t n = len - done, to_chunk = w->chunk_bytes - host % w->chunk_bytes;
        if (n > e->cfg.piece_bytes)
            n = e->cfg.piece_bytes;
        if (n > to_chunk)
            n = to_chunk;
        CUdeviceptr dv = r->va + base + done, hv = w->va + host;
        CUresult res = e->d->memcpy_async(out ? hv : dv, out ? dv : hv, n,
                                          l->s[(*next_stream)++ % e->cfg.streams]);
        if (res != CUDA_SUCCESS)
            return res;
        done += n;
    }
    return CUDA_SUCCESS;
}

struct batch {
    struct lane *lane;
    int slot;
    size_t first, count; /* indices into the move's unit array */
};

static CUresult batch_mark(gs_swap_engine_t *e, struct batch *b)
{
    for (int k = 0; k < e->cfg.streams; k++) {
        CUresult r = e->d->event_record(b->lane->ev[b->slot][k], b->lane->s[k]);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

static CUresult batch_wait(gs_swap_engine_t *e, const struct batch *b)
{
    for (int k = 0; k < e->cfg.streams; k++) {
        CUresult r = e->d->event_synchronize(b->lane->ev[b->slot][k]);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* After a failure: nothing of ours may still be copying. */
static void quiesce(gs_swap_engine_t *e)
{
    for (int i = 0; i < e->nlanes; i++)
        for (int k = 0; k < e->cfg.streams; k++)
            e->d->stream_synchronize(e->lanes[i].s[k]);
}

static int cmp_ctx(const void *a, const void *b)
{
    const gs_swap_range_t *x = a, *y = b;
    uintptr_t cx = (uintptr_t)x->ctx, cy = (uintptr_t)y->ctx;
    if (cx != cy)
        return cx < cy ? -1 : 1;
    return x->va < y->va ? -1 : x->va > y->va;
}

/* The ranges of dev with something to move, grouped by context (op held). */
static gs_swap_range_t *collect(gs_swap_engine_t *e, int dev, int parked, size_t *n)
{
    *n = gs_swap_ranges_list(e->ranges, dev, parked, NULL, 0);
    if (!*n)
        return NULL;
    gs_swap_range_t *rs = malloc(*n * sizeof *rs);
    if (rs) {
        *n = gs_swap_ranges_list(e->ranges, dev, parked, rs, *n);
        qsort(rs, *n, sizeof *rs, cmp_ctx);
    }
    return rs;
}

/* Finishes a batch: swap out releases its segments, swap in counts them
 * resident.  The registry learns each range's new state. */
static CUresult batch_finish(gs_swap_engine_t *e, gs_swap_range_t *rs, struct unit *us,
                             const struct batch *b, int out, gs_swap_result_t *res)
{
    CUresult r = batch_wait(e, b);
    for (size_t i = b->first; r == CUDA_SUCCESS && i < b->first + b->count; i++) {
        gs_swap_range_t *rg = &rs[us[i].range];
        size_t len = gs_swap_seg_len(rg, us[i].seg);
        if (out) {
            r = gs_swap_seg_unback(e, rg, us[i].seg);
            if (r != CUDA_SUCCESS)
                break;
        } else {
            us[i].made = 0; /* resident now: no longer this move's to undo */
            if (!gs_swap_range_parked(rg))
                rg->host_set = 0; /* all back: its place in the window is free again */
        }
        gs_swap_ranges_update(e->ranges, rg);
        res->bytes += len;
    }
    return r;
}

/* Physical memory for a segment, retried while the GPU is full until the
 * deadline: the process on the other side of a switch releases its own
 * batch by batch meanwhile.  The deadline is read at every try: another
 * thread moves it (a second swap_in extends the wait, a swap_out ends it). */
static CUresult back_seg_waiting(gs_swap_engine_t *e, gs_swap_range_t *r, int k,
                                 const int64_t *deadline)
{
    long pause_us = 100;
    for (;;) {
        CUresult res = gs_swap_seg_back(e, r, k);
        if (res != CUDA_ERROR_OUT_OF_MEMORY ||
            gs_swap_now_ns() >= __atomic_load_n(deadline, __ATOMIC_ACQUIRE))
            return res;
        struct timespec ts = {0, pause_us * 1000};
        nanosleep(&ts, NULL);
        if (pause_us < 2000)
            pause_us *= 2;
    }
}

/* The last position of [off, off + len) given back early, or -1. */
static int gone_in(const gs_swap_window_t *w, uint64_t off, uint64_t len)
{
    if (!w->gone || !w->chunk_bytes || !len)
        return -1;
    int last = -1;
    for (uint64_t c = off / w->chunk_bytes;
         c * w->chunk_bytes < off + len && c < (uint64_t)w->chunks; c++)
        if (w->gone[c])
            last = (int)c;
    return last;
}

/* Where the ranges that go out for the first time go in the window: after
 * those already there (a partly parked range keeps its place). */
static int place(gs_swap_engine_t *e, int dev, gs_swap_range_t *rs, size_t n,
                 const gs_swap_window_t *w, char *err, size_t errlen)
{
    uint64_t end = 0;
    size_t np = gs_swap_ranges_list(e->ranges, dev, 1, NULL, 0);
    gs_swap_range_t *ps = np ? malloc(np * sizeof *ps) : NULL;
    np = ps ? gs_swap_ranges_list(e->ranges, dev, 1, ps, np) : 0;
    for (size_t k = 0; k < np; k++)
        if (ps[k].host_set && ps[k].host_off + ps[k].bytes > end)
            end = ps[k].host_off + ps[k].bytes;
    free(ps);
    for (size_t i = 0; i < n; i++) {
        if (!rs[i].host_set) {
            /* Past the positions a failed swap in gave back early: they
             * are no longer mapped (swap_window.h, gs_swap_window_drop). */
            for (int g; (g = gone_in(w, end, rs[i].bytes)) >= 0;)
                end = (uint64_t)(g + 1) * w->chunk_bytes;
            rs[i].host_off = end;
            rs[i].host_set = 1;
            end += rs[i].bytes;
        }
        if (rs[i].host_off + rs[i].bytes > w->bytes) {
            snprintf(err, errlen, "the host window holds %zu bytes, the GPU's ranges need %llu",
                     w->bytes, (unsigned long long)(rs[i].host_off + rs[i].bytes));
            return -1;
        }
    }
    return 0;
}

/* Where a segment's bytes end in the window. */
static uint64_t host_end(const gs_swap_range_t *r, int k)
{
    return r->host_off + gs_swap_seg_off(r, k) + gs_swap_seg_len(r, k);
}

/* One move's state, for the steps below. */
struct mover {
    gs_swap_engine_t *e;
    gs_swap_window_t *w;
    int out;
    const gs_swap_calls_t *calls;
    const int64_t *deadline; /* swap in: how long to wait for GPU memory */
    gs_swap_range_t *rs;
    size_t n; /* ranges */
    struct unit *us;
    size_t nu;
    size_t next;     /* the next unit to copy */
    size_t finished; /* units [0, finished) are done (batches finish in order) */
    uint64_t total;
    unsigned char *busy; /* swap in: per window position, still holding data to come */
    int *pos;
    gs_swap_result_t *res;
    /* The copies under way: this batch, and the one before (have_prev),
     * finished while this one's copies run. */
    struct batch prev, cur;
    int have_prev, next_stream, slot;
    CUresult r; /* a driver call failed, at step */
    const char *step;
    int rc; /* -1: failed with res->error said (r: the driver's error) */
};

static int mover_ok(const struct mover *m)
{
    return m->r == CUDA_SUCCESS && m->rc == 0;
}

static const char *mover_finishing(const struct mover *m)
{
    return m->out ? "releasing copied memory" : "cuEventSynchronize";
}

/* Swap in: tells the caller which positions of the window hold nothing
 * still to come back (each once). */
static void report_done(struct mover *m)
{
    gs_swap_window_t *w = m->w;
    if (m->out || !m->calls || !m->calls->done || !m->busy || !w->chunk_bytes)
        return;
    memset(m->busy, 0, (size_t)w->chunks);
    for (size_t i = m->finished; i < m->nu; i++) {
        const gs_swap_range_t *r = &m->rs[m->us[i].range];
        uint64_t a = r->host_off + gs_swap_seg_off(r, m->us[i].seg), b = host_end(r, m->us[i].seg);
        for (uint64_t c = a / w->chunk_bytes; c * w->chunk_bytes < b && c < (uint64_t)w->chunks;
             c++)
            m->busy[c] = 1;
    }
    int n = 0;
    for (int c = 0; c < w->mapped; c++)
        if (!m->busy[c] && !w->gone[c])
            m->pos[n++] = c;
    if (n)
        m->calls->done(m->calls->arg, w, m->pos, n);
}

static CUresult finish(struct mover *m, const struct batch *b)
{
    CUresult r = batch_finish(m->e, m->rs, m->us, b, m->out, m->res);
    if (r != CUDA_SUCCESS)
        return r;
    m->finished = b->first + b->count;
    if (m->calls && m->calls->progress)
        m->calls->progress(m->calls->arg, m->res->bytes, m->total);
    report_done(m);
    return CUDA_SUCCESS;
}

/* The units to move, in order (out: segments on the GPU, up to limit; in:
 * those not), and for a swap out their places in the window (op held).
 * 0, or -1 with res->error said. */
static int mover_plan(struct mover *m, int dev, uint64_t limit)
{
    gs_swap_engine_t *e = m->e;
    gs_swap_window_t *w = m->w;
    gs_swap_result_t *res = m->res;
    int out = m->out;
    size_t n = 0, nu = 0;
    gs_swap_range_t *rs = m->rs = collect(e, dev, !out, &n);
    m->n = n;
    if (n && !rs) {
        snprintf(res->error, sizeof res->error, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        nu += (size_t)rs[i].nseg;
    struct unit *us = m->us = nu ? malloc(nu * sizeof *us) : NULL;
    if (!out && w->chunks > 0) {
        m->busy = malloc((size_t)w->chunks);
        m->pos = malloc((size_t)w->chunks * sizeof *m->pos);
    }
    if ((nu && !us) || (!out && w->chunks > 0 && (!m->busy || !m->pos))) {
        snprintf(res->error, sizeof res->error, "out of memory");
        return -1;
    }
    nu = 0;
    for (size_t i = 0; i < n; i++) {
        if (!out && (!rs[i].host_set || rs[i].host_off + rs[i].bytes > w->bytes)) {
            snprintf(res->error, sizeof res->error, "a parked range lies outside the window");
            return -1;
        }
        for (int k = 0; k < rs[i].nseg; k++)
            if (!rs[i].seg[k] == !out && (!out || !limit || m->total < limit)) {
                /* out: segments on the GPU (up to limit); in: those not */
                us[nu++] = (struct unit){i, k, 0};
                m->total += gs_swap_seg_len(&rs[i], k);
            }
    }
    m->nu = nu;
    /* Swap out: every range listed has something on the GPU, so those
     * with a segment going out are the first ones, up to the last unit's
     * (a partial swap out stops there); only they take a place in the
     * window, and a range that stays is placed afresh by a later one. */
    if (out &&
        place(e, dev, rs, nu ? us[nu - 1].range + 1 : 0, w, res->error, sizeof res->error) != 0)
        return -1;
    return 0;
}

/* Before segment seg of rg is copied: what the other side of a switch
 * still holds (host chunks going out, GPU memory coming in) is waited for
 * at the start of a batch, with the batch before finished and handed
 * over: the other side may be waiting for exactly that.  1: copy it; 0:
 * the batch ends before it (the next batch waits); -1: failed (m says). */
static int mover_unit_ready(struct mover *m, gs_swap_range_t *rg, int seg)
{
    const gs_swap_calls_t *calls = m->calls;
    gs_swap_result_t *res = m->res;
    int out = m->out;
    uint64_t need = host_end(rg, seg);
    int beyond = need > gs_swap_window_mapped_bytes(m->w);
    /* A swap in reads the segment from the window: where its chunk is not
     * mapped (a window hollowed for the disk tier, swap_window.h) and the
     * caller cannot map it, it fails here rather than copy from nothing. */
    if (beyond && !out && !(calls && calls->more)) {
        snprintf(res->error, sizeof res->error,
                 "a parked segment lies beyond the host memory mapped (%zu of %llu bytes)",
                 gs_swap_window_mapped_bytes(m->w), (unsigned long long)need);
        m->rc = -1;
        return -1;
    }
    int wait_host = beyond && calls && calls->more;
    if (wait_host) { /* chunks at hand are mapped while the copies run */
        int more = calls->more(calls->arg, m->w, need, 0, res->error, sizeof res->error);
        if (more < 0) {
            m->rc = -1;
            return -1;
        }
        wait_host = more > 0;
    }
    if (wait_host && m->cur.count > 0)
        return 0;
    CUresult got = CUDA_SUCCESS;
    if (!out && !wait_host && (got = gs_swap_seg_back(m->e, rg, seg)) == CUDA_ERROR_OUT_OF_MEMORY &&
        m->cur.count > 0)
        return 0; /* the next batch waits */
    if (wait_host || got == CUDA_ERROR_OUT_OF_MEMORY) {
        if (m->have_prev) {
            if ((m->r = finish(m, &m->prev)) != CUDA_SUCCESS) {
                m->step = mover_finishing(m);
                return -1;
            }
            m->have_prev = 0;
        }
        if (wait_host &&
            calls->more(calls->arg, m->w, need, 1, res->error, sizeof res->error) != 0) {
            m->rc = -1;
            return -1;
        }
        if (!out)
            got = back_seg_waiting(m->e, rg, seg, m->deadline);
    }
    if (got != CUDA_SUCCESS) {
        m->r = got;
        m->step = "physical memory for a parked segment";
        return -1;
    }
    return 1;
}

/* The current batch's copies on lane l: units of ctx from m->next on,
 * until the batch holds batch_bytes (ctx current). */
static void mover_fill_batch(struct mover *m, struct lane *l, CUcontext ctx)
{
    gs_swap_engine_t *e = m->e;
    size_t bytes = 0;
    while (m->next < m->nu && m->rs[m->us[m->next].range].ctx == ctx &&
           (m->cur.count == 0 || bytes < e->cfg.batch_bytes)) {
        struct unit *un = &m->us[m->next];
        gs_swap_range_t *rg = &m->rs[un->range];
        if (mover_unit_ready(m, rg, un->seg) <= 0)
            return;
        if (!m->out)
            un->made = 1;
        m->cur.count++;
        if ((m->r = copy_seg(e, l, rg, un->seg, m->w, m->out, &m->next_stream)) != CUDA_SUCCESS) {
            m->step = "cuMemcpyAsync";
            return;
        }
        bytes += gs_swap_seg_len(rg, un->seg);
        m->next++;
    }
}

/* Every unit copied, batch by batch (a batch per context, at most
 * batch_bytes), each batch finished while the next one's copies run; the
 * last one finished at the end. */
static void mover_run(struct mover *m)
{
    gs_swap_engine_t *e = m->e;
    CUcontext old;
    while (m->next < m->nu) {
        CUcontext ctx = m->rs[m->us[m->next].range].ctx;
        if ((m->r = e->d->ctx_push(ctx)) != CUDA_SUCCESS) {
            m->step = "cuCtxPushCurrent";
            return;
        }
        struct lane *l = gs_swap_lane_of(e, ctx, m->res->error, sizeof m->res->error);
        if (!l) {
            e->d->ctx_pop(&old);
            m->rc = -1;
            return;
        }
        m->cur = (struct batch){l, m->slot, m->next, 0};
        mover_fill_batch(m, l, ctx);
        if (mover_ok(m) && (m->r = batch_mark(e, &m->cur)) != CUDA_SUCCESS)
            m->step = "cuEventRecord";
        if (mover_ok(m) && m->have_prev && (m->r = finish(m, &m->prev)) != CUDA_SUCCESS)
            m->step = mover_finishing(m);
        e->d->ctx_pop(&old);
        if (!mover_ok(m))
            return;
        m->prev = m->cur;
        m->have_prev = m->cur.count > 0;
        m->slot ^= 1;
    }
    if (m->have_prev && e->d->ctx_push(m->prev.lane->ctx) == CUDA_SUCCESS) {
        m->r = finish(m, &m->prev);
        e->d->ctx_pop(&old);
        if (m->r != CUDA_SUCCESS)
            m->step = mover_finishing(m);
    }
}

/* A move that failed: the copies under way end; on a swap in, segments
 * made but not yet counted resident go again (their bytes are still in
 * the window). */
static void mover_undo(struct mover *m)
{
    gs_swap_engine_t *e = m->e;
    quiesce(e);
    for (size_t i = 0; !m->out && i < m->nu; i++)
        if (m->us[i].made) {
            gs_swap_seg_unback(e, &m->rs[m->us[i].range], m->us[i].seg);
            gs_swap_ranges_update(e->ranges, &m->rs[m->us[i].range]);
        }
    if (m->r != CUDA_SUCCESS)
        snprintf(m->res->error, sizeof m->res->error, "%s: %s", m->step, gs_swap_errname(e, m->r));
    m->rc = -1;
}

static int move(gs_swap_engine_t *e, int dev, gs_swap_window_t *w, int out, uint64_t limit,
                const int64_t *deadline, const gs_swap_calls_t *calls, gs_swap_result_t *res)
{
    memset(res, 0, sizeof *res);
    int64_t t0 = gs_swap_now_ns();
    pthread_mutex_lock(&e->op);
    struct mover m = {
        .e = e, .w = w, .out = out, .calls = calls, .deadline = deadline, .res = res, .step = ""};
    if (mover_plan(&m, dev, limit) != 0) {
        m.rc = -1;
    } else {
        report_done(&m); /* positions nothing comes back from (spare room) */
        mover_run(&m);
        if (!mover_ok(&m))
            mover_undo(&m);
        if (out && m.rc == 0) /* the places given to ranges that had nothing to move yet */
            for (size_t i = 0; i < m.n; i++)
                gs_swap_ranges_update(e->ranges, &m.rs[i]);
        for (size_t i = 0; i < m.n; i++) /* ranges that went all the way */
            res->ranges += out ? !m.rs[i].resident_bytes : !gs_swap_range_parked(&m.rs[i]);
    }
    pthread_mutex_unlock(&e->op);
    free(m.us);
    free(m.rs);
    free(m.busy);
    free(m.pos);
    res->elapsed_ns = gs_swap_now_ns() - t0;
    return m.rc;
}

int gs_swap_move(gs_swap_engine_t *e, int dev, gs_swap_window_t *w, int out, uint64_t limit,
                 const int64_t *deadline, const gs_swap_calls_t *calls, gs_swap_result_t *res)
{
    static const int64_t no_wait = 0;
    return move(e, dev, w, out, limit, deadline ? deadline : &no_wait, calls, res);
}

int gs_swap_out(gs_swap_engine_t *e, int dev, const gs_swap_window_t *w,
                gs_swap_progress_fn progress, void *arg, gs_swap_result_t *res)
{
    gs_swap_window_t copy = *w; /* without calls nothing changes it */
    gs_swap_calls_t calls = {progress, NULL, NULL, arg};
    return gs_swap_move(e, dev, &copy, 1, 0, NULL, &calls, res);
}

int64_t gs_swap_deadline(unsigned wait_ms)
{
    return gs_swap_now_ns() + (int64_t)wait_ms * 1000000;
}

int gs_swap_in(gs_swap_engine_t *e, int dev, const gs_swap_window_t *w, unsigned wait_ms,
               gs_swap_progress_fn progress, void *arg, gs_swap_result_t *res)
{
    int64_t deadline = gs_swap_deadline(wait_ms);
    return gs_swap_in_until(e, dev, w, &deadline, progress, arg, res);
}

int gs_swap_in_until(gs_swap_engine_t *e, int dev, const gs_swap_window_t *w,
                     const int64_t *deadline, gs_swap_progress_fn progress, void *arg,
                     gs_swap_result_t *res)
{
    gs_swap_window_t copy = *w;
    gs_swap_calls_t calls = {progress, NULL, NULL, arg};
    return gs_swap_move(e, dev, &copy, 0, 0, deadline, &calls, res);
}
