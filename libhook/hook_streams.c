/*
 * hook_streams.c - which streams received work since the grant, and waiting
 * for that work without disturbing the program.
 *
 * Giving a GPU back must wait for the work already submitted, but a
 * cuCtxSynchronize would wait for everything (and fails during a capture),
 * and the program's own streams must keep their own synchronisation.  So
 * each submission marks its stream (explicit streams by handle; the legacy
 * and per-thread default streams as "the default streams of this context":
 * an event on the legacy stream waits for both, as both are blocking
 * streams), and a drain records one event on each marked stream of the
 * device and synchronises on those events from the helper thread.
 *
 * Marking costs nothing on the fast path once a thread has marked a stream
 * in the current epoch (its per-thread cache); the first submission to a
 * stream per grant takes hook_smu.  cuStreamDestroy and context teardown
 * remove entries under the same lock, so a drain never records on a stream
 * that is gone.
 */
#include "hook_internal.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "gs_assert.h"

pthread_mutex_t hook_smu = PTHREAD_MUTEX_INITIALIZER;

struct sentry {
    CUstream s; /* explicit stream, or NULL for "default streams of ctx" */
    CUcontext ctx;
    CUgreenCtx green; /* the green context the stream was created in, if any */
    int dev;
    unsigned long long mark; /* hook_track_epoch when last marked */
};

static struct sentry *set;
static size_t nset, capset;

static struct sentry *find_locked(CUstream s, CUcontext ctx)
{
    GS_ASSERT_HELD(&hook_smu);
    for (size_t i = 0; i < nset; i++)
        if (s ? set[i].s == s : (!set[i].s && set[i].ctx == ctx))
            return &set[i];
    return NULL;
}

static struct sentry *add_locked(void)
{
    GS_ASSERT_HELD(&hook_smu);
    if (nset == capset) {
        size_t cap = capset ? capset * 2 : 32;
        struct sentry *n = realloc(set, cap * sizeof *n);
        if (!n)
            return NULL;
        set = n;
        capset = cap;
    }
    memset(&set[nset], 0, sizeof set[nset]);
    return &set[nset++];
}

static void remove_at_locked(size_t i)
{
    GS_ASSERT_HELD(&hook_smu);
    set[i] = set[--nset];
}

void hook_track_slow(struct hook_thr *t, CUstream s, unsigned long long epoch)
{
    t->nest++;
    CUcontext ctx = NULL;
    int implicit = hook_stream_implicit(s);
    if (implicit && (!hook_cu.ctxGetCurrent || hook_cu.ctxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx))
        goto out;
    pthread_mutex_lock(&hook_smu);
    struct sentry *e = find_locked(implicit ? NULL : s, ctx);
    if (!e) {
        int dev;
        CUcontext sctx;
        if (hook_stream_where(s, &sctx, &dev) != 0) {
            pthread_mutex_unlock(&hook_smu);
            goto out;
        }
        CUgreenCtx green = NULL;
        if (!implicit && hook_cu.streamGetCtx2) {
            CUcontext c2;
            if (hook_cu.streamGetCtx2(s, &c2, &green) != CUDA_SUCCESS)
                green = NULL;
        }
        e = add_locked();
        if (!e) {
            pthread_mutex_unlock(&hook_smu);
            goto out;
        }
        e->s = implicit ? NULL : s;
        e->ctx = sctx;
        e->green = green;
        e->dev = dev;
    }
    e->mark = epoch;
    int dev = e->dev;
    pthread_mutex_unlock(&hook_smu);
    unsigned i = t->cache_next++ % HOOK_TCACHE;
    t->cache[i].s = s;
    t->cache[i].epoch = epoch;
    t->cache[i].ctx_gen = t->ctx_gen;
    t->cache[i].bflag = dev >= 0 && dev < HOOK_MAX_DEVICES && !hook_cfg.bursts_off
                            ? &hook_burst_flag[dev]
                            : &hook_burst_off;
    t->bflag = t->cache[i].bflag;
    t->nest--;
    hook_burst_check(t);
    return;
out:
    t->bflag = &hook_burst_off;
    t->nest--;
}

void hook_streams_forget_stream(CUstream s)
{
    for (size_t i = 0; i < nset;)
        if (set[i].s == s && s)
            remove_at_locked(i);
        else
            i++;
}

void hook_streams_forget_ctx(CUcontext ctx)
{
    pthread_mutex_lock(&hook_smu);
    for (size_t i = 0; i < nset;)
        if (set[i].ctx == ctx)
            remove_at_locked(i);
        else
            i++;
    pthread_mutex_unlock(&hook_smu);
}

void hook_streams_forget_green(CUgreenCtx g)
{
    pthread_mutex_lock(&hook_smu);
    for (size_t i = 0; i < nset;)
        if (g && set[i].green == g)
            remove_at_locked(i);
        else
            i++;
    pthread_mutex_unlock(&hook_smu);
}

struct pending {
    CUcontext ctx;
    CUevent ev;
};

/* Runs on the helper thread (internal: its calls reach the driver
 * directly), with no capture in progress and context teardown held off
 * (hook_drain.c arranges both). */
int hook_streams_drain(int dev, unsigned long long since, int may_block)
{
    if (!hook_cu.ctxSetCurrent || !hook_cu.eventCreate || !hook_cu.eventRecord ||
        !hook_cu.eventSynchronize || !hook_cu.eventDestroy)
        return 1;
    if (!may_block && !hook_cu.eventQuery)
        return 0;
    int done = 1;
    pthread_mutex_lock(&hook_smu);
    struct pending *p = calloc(nset ? nset : 1, sizeof *p);
    size_t np = 0;
    for (size_t i = 0; p && i < nset; i++) {
        struct sentry *e = &set[i];
        if (e->dev != dev || e->mark < since)
            continue;
        if (hook_cu.ctxSetCurrent(e->ctx) != CUDA_SUCCESS)
            continue;
        CUstream s = e->s ? e->s : CU_STREAM_LEGACY;
        if (e->s && hook_stream_capturing(s))
            continue; /* its work is a graph now, not running */
        CUevent ev;
        if (hook_cu.eventCreate(&ev, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC) !=
            CUDA_SUCCESS)
            continue;
        CUresult r = hook_cu.eventRecord(ev, s);
        if (r != CUDA_SUCCESS) {
            gs_debug("drain: cannot record an event on stream %p (error %d)", (void *)s, (int)r);
            hook_cu.eventDestroy(ev);
            continue;
        }
        p[np].ctx = e->ctx;
        p[np].ev = ev;
        np++;
    }
    pthread_mutex_unlock(&hook_smu);
    /* On an idle GPU the events complete within microseconds, and a
     * blocking-sync wait would add the interrupt wake-up (~1 ms measured on
     * an H200); so poll briefly first, then block without burning a core. */
    uint64_t spin_until = hook_now_ns() + 200000;
    for (size_t i = 0; i < np; i++) {
        hook_cu.ctxSetCurrent(p[i].ctx);
        CUresult r = CUDA_ERROR_NOT_READY;
        while (hook_cu.eventQuery && hook_now_ns() < spin_until &&
               (r = hook_cu.eventQuery(p[i].ev)) == CUDA_ERROR_NOT_READY)
            ;
        if (r == CUDA_ERROR_NOT_READY && !may_block)
            done = 0; /* the helper thread will wait for it */
        else if (r != CUDA_SUCCESS)
            r = hook_cu.eventSynchronize(p[i].ev);
        if (r != CUDA_SUCCESS)
            gs_debug("drain: event synchronisation failed (error %d)", (int)r);
        hook_cu.eventDestroy(p[i].ev);
    }
    hook_cu.ctxSetCurrent(NULL);
    gs_debug("drained GPU %d: %zu stream(s)%s", dev, np, done ? "" : " (not yet complete)");
    free(p);
    return done;
}

/* For the burst monitor (hook_burst.c), on its own thread, with captures
 * and context teardown held off: one timing event on every stream of dev
 * that got work since `since`, recorded after that work.  Returns the
 * events (malloc'ed; *n of them) for the caller to wait on and destroy. */
struct hook_ev *hook_streams_record(int dev, unsigned long long since, size_t *n,
                                    CUevent (*get)(int dev, CUcontext ctx))
{
    *n = 0;
    if (!hook_cu.ctxSetCurrent || !hook_cu.eventCreate || !hook_cu.eventRecord ||
        !hook_cu.eventDestroy)
        return NULL;
    pthread_mutex_lock(&hook_smu);
    struct hook_ev *p = calloc(nset ? nset : 1, sizeof *p);
    size_t np = 0;
    for (size_t i = 0; p && i < nset; i++) {
        struct sentry *e = &set[i];
        if (e->dev != dev || e->mark < since)
            continue;
        if (hook_cu.ctxSetCurrent(e->ctx) != CUDA_SUCCESS)
            continue;
        CUstream s = e->s ? e->s : CU_STREAM_LEGACY;
        if (e->s && hook_stream_capturing(s))
            continue;
        CUevent ev = get(dev, e->ctx);
        if (!ev)
            continue;
        if (hook_cu.eventRecord(ev, s) != CUDA_SUCCESS) {
            hook_cu.eventDestroy(ev);
            continue;
        }
        p[np].ctx = e->ctx;
        p[np].ev = ev;
        np++;
    }
    pthread_mutex_unlock(&hook_smu);
    *n = np;
    return p;
}

void hook_streams_atfork_prepare(void)
{
    pthread_mutex_lock(&hook_smu);
}

void hook_streams_atfork_parent(void)
{
    pthread_mutex_unlock(&hook_smu);
}

void hook_streams_atfork_child(void)
{
    pthread_mutex_init(&hook_smu, NULL);
    nset = 0; /* the parent's streams mean nothing here */
}
