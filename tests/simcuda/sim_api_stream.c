/*
 * sim_api_stream.c - stream and event entry points (create/destroy, query,
 * synchronize, wait-event, host functions and callbacks, event timing),
 * each with its _ptsz variant where cuda.h has one.  Queuing and waiting
 * are in sim_engine.c; stream capture interplay in sim_graph.c.
 */
#include "sim_internal.h"

#include <stdlib.h>

/* ---- streams ---------------------------------------------------------- */

static CUresult stream_create(CUstream *ph, unsigned int flags, int priority)
{
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    if (priority > 0)
        priority = 0;
    if (priority < -5)
        priority = -5;
    sim_lock();
    struct sim_ctx *c;
    CUresult rc = sim_ctx_get(&c);
    if (rc == CUDA_SUCCESS) {
        struct sim_stream *s = sim_stream_new_locked(c, flags, priority, 0);
        if (s)
            *ph = (CUstream)s;
        else
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    SIM_GATED(stream_create(phStream, Flags, 0));
}

SIM_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    SIM_GATED(stream_create(phStream, flags, priority));
}

static CUresult stream_destroy(CUstream h)
{
    sim_lock();
    struct sim_stream *s = sim_hmap_get(&sim_g.handles, (uintptr_t)h, SIM_H_STREAM);
    if (s)
        sim_stream_destroy_locked(s); /* queued work still runs */
    sim_unlock();
    return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    SIM_GATED(stream_destroy(hStream));
}

SIM_EXPORT CUresult cuStreamDestroy(CUstream hStream)
{
    SIM_GATED(stream_destroy(hStream));
}

static CUresult stream_sync(CUstream h, int pt)
{
    sim_lock();
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve(h, pt, &s);
    if (rc == CUDA_SUCCESS)
        rc = sim_stream_sync_locked(s);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
    SIM_GATED(stream_sync(hStream, 0));
}

SIM_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    SIM_GATED(stream_sync(hStream, 1));
}

static CUresult stream_query(CUstream h, int pt)
{
    sim_lock();
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve(h, pt, &s);
    if (rc == CUDA_SUCCESS && s->capture) {
        sim_capture_invalidate_locked(s->capture);
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (rc == CUDA_SUCCESS && !sim_stream_idle(s))
        rc = CUDA_ERROR_NOT_READY;
    if (rc == CUDA_SUCCESS && s->is_default) {
        /* the legacy stream also waits for the blocking streams */
        for (struct sim_stream *t = s->ctx->streams; t; t = t->next)
            if (!(t->flags & CU_STREAM_NON_BLOCKING) && !t->capture && !sim_stream_idle(t))
                rc = CUDA_ERROR_NOT_READY;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamQuery(CUstream hStream)
{
    SIM_GATED(stream_query(hStream, 0));
}

SIM_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream)
{
    SIM_GATED(stream_query(hStream, 1));
}

static CUresult wait_event(CUstream h, CUevent he, unsigned int flags, int pt)
{
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve(h, pt, &s);
    struct sim_event *e = sim_hmap_get(&sim_g.handles, (uintptr_t)he, SIM_H_EVENT);
    if (rc == CUDA_SUCCESS && !e)
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS) {
        struct sim_capture *cap = e->capture_id ? sim_capture_find_locked(e->capture_id) : NULL;
        if (cap) {
            /* fork into a capture: the stream joins it (recorded ops of all
             * joined streams form one linear graph) */
            if (!s->capture) {
                if (s->is_default)
                    rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
                else
                    s->capture = cap;
            }
        } else if (s->capture) {
            /* ordering against work outside the capture: nothing to record */
        } else if (e->done_gen < e->record_gen) {
            struct sim_op *op = sim_op_new(SIM_OP_WAIT_EVENT);
            if (!op) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                op->u.event.ev = e;
                op->u.event.gen = e->record_gen;
                e->refs++;
                rc = sim_submit_locked(s, op);
            }
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    SIM_GATED(wait_event(hStream, hEvent, Flags, 0));
}

SIM_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    SIM_GATED(wait_event(hStream, hEvent, Flags, 1));
}

static CUresult host_op(CUstream h, int pt, struct sim_op *op)
{
    sim_lock();
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve(h, pt, &s);
    if (rc == CUDA_SUCCESS) {
        if (op->type == SIM_OP_CALLBACK)
            op->u.callback.handle = h;
        rc = sim_submit_locked(s, op);
    } else {
        sim_op_free_locked(op);
    }
    sim_unlock();
    return rc;
}

static CUresult launch_host_func(CUstream h, CUhostFn fn, void *arg, int pt)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_op *op = sim_op_new(SIM_OP_HOSTFN);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.hostfn.fn = fn;
    op->u.hostfn.arg = arg;
    return host_op(h, pt, op);
}

SIM_EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    SIM_GATED(launch_host_func(hStream, fn, userData, 0));
}

SIM_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
    SIM_GATED(launch_host_func(hStream, fn, userData, 1));
}

static CUresult add_callback(CUstream h, CUstreamCallback fn, void *arg, unsigned int flags, int pt)
{
    if (!fn || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_op *op = sim_op_new(SIM_OP_CALLBACK);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.callback.fn = fn;
    op->u.callback.arg = arg;
    return host_op(h, pt, op);
}

SIM_EXPORT CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
                                        unsigned int flags)
{
    SIM_GATED(add_callback(hStream, callback, userData, flags, 0));
}

SIM_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback,
                                             void *userData, unsigned int flags)
{
    SIM_GATED(add_callback(hStream, callback, userData, flags, 1));
}

/* Small getters. */
enum { Q_PRIORITY, Q_FLAGS, Q_CTX, Q_ID };

static CUresult stream_get(CUstream h, int what, void *out, int pt)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve(h, pt, &s);
    if (rc == CUDA_SUCCESS) {
        switch (what) {
        case Q_PRIORITY:
            *(int *)out = s->priority;
            break;
        case Q_FLAGS:
            *(unsigned int *)out = s->flags;
            break;
        case Q_CTX:
            *(CUcontext *)out = (CUcontext)s->ctx;
            break;
        default:
            *(unsigned long long *)out = s->id;
            break;
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
    SIM_GATED(stream_get(hStream, Q_PRIORITY, priority, 0));
}

SIM_EXPORT CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority)
{
    SIM_GATED(stream_get(hStream, Q_PRIORITY, priority, 1));
}

SIM_EXPORT CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    SIM_GATED(stream_get(hStream, Q_FLAGS, flags, 0));
}

SIM_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{
    SIM_GATED(stream_get(hStream, Q_FLAGS, flags, 1));
}

SIM_EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    SIM_GATED(stream_get(hStream, Q_CTX, pctx, 0));
}

SIM_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx)
{
    SIM_GATED(stream_get(hStream, Q_CTX, pctx, 1));
}

SIM_EXPORT CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
    SIM_GATED(stream_get(hStream, Q_ID, streamId, 0));
}

SIM_EXPORT CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId)
{
    SIM_GATED(stream_get(hStream, Q_ID, streamId, 1));
}

/* ---- events ----------------------------------------------------------- */

static CUresult event_create(CUevent *ph, unsigned int flags)
{
    if (!ph || (flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                                    CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ctx *c;
    CUresult rc = sim_ctx_get(&c);
    struct sim_event *e = NULL;
    if (rc == CUDA_SUCCESS) {
        e = calloc(1, sizeof *e);
        if (!e || sim_hmap_put(&sim_g.handles, (uintptr_t)e, SIM_H_EVENT, e) != 0) {
            free(e);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            e->flags = flags;
            e->refs = 1;
            *ph = (CUevent)e;
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    SIM_GATED(event_create(phEvent, Flags));
}

static CUresult event_record(CUevent he, CUstream h, unsigned int flags, int pt)
{
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve(h, pt, &s);
    struct sim_event *e = sim_hmap_get(&sim_g.handles, (uintptr_t)he, SIM_H_EVENT);
    if (rc == CUDA_SUCCESS && !e)
        rc = CUDA_ERROR_INVALID_HANDLE;
    struct sim_op *op = NULL;
    if (rc == CUDA_SUCCESS && !(op = sim_op_new(SIM_OP_EVENT)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        op->u.event.ev = e;
        e->refs++;
        if (s->capture) {
            e->capture_id = s->capture->id; /* node of the graph being captured */
            op->u.event.gen = 0;
        } else {
            e->capture_id = 0;
            op->u.event.gen = ++e->record_gen;
        }
        rc = sim_submit_locked(s, op);
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    SIM_GATED(event_record(hEvent, hStream, 0, 0));
}

SIM_EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    SIM_GATED(event_record(hEvent, hStream, 0, 1));
}

SIM_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    SIM_GATED(event_record(hEvent, hStream, flags, 0));
}

SIM_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                                unsigned int flags)
{
    SIM_GATED(event_record(hEvent, hStream, flags, 1));
}

static CUresult event_query(CUevent he)
{
    sim_lock();
    struct sim_event *e = sim_hmap_get(&sim_g.handles, (uintptr_t)he, SIM_H_EVENT);
    CUresult rc = !e                            ? CUDA_ERROR_INVALID_HANDLE
                  : e->done_gen < e->record_gen ? CUDA_ERROR_NOT_READY
                                                : CUDA_SUCCESS;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuEventQuery(CUevent hEvent)
{
    SIM_GATED(event_query(hEvent));
}

struct evwait {
    const struct sim_event *e;
    uint64_t gen;
};

static int event_reached(void *arg)
{
    const struct evwait *w = arg;
    return w->e->done_gen >= w->gen;
}

static CUresult event_sync(CUevent he)
{
    sim_lock();
    struct sim_event *e = sim_hmap_get(&sim_g.handles, (uintptr_t)he, SIM_H_EVENT);
    if (e) {
        struct evwait w = {e, e->record_gen};
        e->refs++;
        sim_wait_locked(event_reached, &w);
        sim_event_unref_locked(e);
    }
    sim_unlock();
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
    SIM_GATED(event_sync(hEvent));
}

static CUresult elapsed(float *ms, CUevent hs, CUevent he)
{
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_event *a = sim_hmap_get(&sim_g.handles, (uintptr_t)hs, SIM_H_EVENT);
    struct sim_event *b = sim_hmap_get(&sim_g.handles, (uintptr_t)he, SIM_H_EVENT);
    CUresult rc = CUDA_SUCCESS;
    if (!a || !b || (a->flags & CU_EVENT_DISABLE_TIMING) || (b->flags & CU_EVENT_DISABLE_TIMING) ||
        a->record_gen == 0 || b->record_gen == 0)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (a->done_gen < a->record_gen || b->done_gen < b->record_gen)
        rc = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)((double)((int64_t)b->time_ns - (int64_t)a->time_ns) / 1e6);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    SIM_GATED(elapsed(pMilliseconds, hStart, hEnd));
}

SIM_EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    SIM_GATED(elapsed(pMilliseconds, hStart, hEnd));
}

static CUresult event_destroy(CUevent he)
{
    sim_lock();
    struct sim_event *e = sim_hmap_del(&sim_g.handles, (uintptr_t)he, SIM_H_EVENT);
    if (e)
        sim_event_unref_locked(e);
    sim_unlock();
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
    SIM_GATED(event_destroy(hEvent));
}

SIM_EXPORT CUresult cuEventDestroy(CUevent hEvent)
{
    SIM_GATED(event_destroy(hEvent));
}
