/*
 * hook_capture.c - stream capture bookkeeping.
 *
 * Work enqueued on a capturing stream becomes part of a graph and runs only
 * at cuGraphLaunch (which is gated), so it passes the gate without a grant.
 * More importantly, while any stream of the process is capturing the hook
 * must not synchronise anything: the driver refuses (and may invalidate the
 * program's capture).  Interposing every BeginCapture/EndCapture variant
 * gives an exact count of captures in progress; a drain waits for it to
 * reach zero and, while it records and synchronises its events, new
 * captures wait for it (briefly: only for work submitted before the gate
 * closed).  The thread that began a capture is remembered, so that thread
 * is never held at the gate (a drain waiting for its capture to end would
 * otherwise wait for ever).
 */
#include "hook_internal.h"

#include <stdlib.h>

#include "log.h"
#include "gs_assert.h"

struct capture {
    CUstream s; /* normalised: CU_STREAM_PER_THREAD stands for this thread's */
    struct hook_thr *owner;
    struct capture *next;
};
static struct capture *captures; /* hook_mu */

/* A burst monitor calling the driver gives way at once (it watches
 * hook_capture_want); a drain synchronising finishes first. */
void hook_wait_no_drain_locked(void)
{
    GS_ASSERT_HELD(&hook_mu);
    atomic_fetch_add(&hook_capture_want, 1);
    pthread_cond_broadcast(&hook_cv);
    while (hook_st.drain_syncing || hook_st.monitor_active)
        pthread_cond_wait(&hook_cv, &hook_mu);
    atomic_fetch_sub(&hook_capture_want, 1);
}

/* Before the real BeginCapture: counts the capture as begun (so no drain
 * can start synchronising in between). */
static struct capture *begin_enter(struct hook_thr *t, CUstream s)
{
    struct capture *c = malloc(sizeof *c);
    pthread_mutex_lock(&hook_mu);
    hook_wait_no_drain_locked();
    atomic_fetch_add(&hook_capture_count, 1);
    atomic_fetch_add_explicit(&t->captures, 1, memory_order_relaxed);
    if (c) {
        c->s = s;
        c->owner = t;
        c->next = captures;
        captures = c;
    }
    pthread_mutex_unlock(&hook_mu);
    return c;
}

static void end_locked(struct capture *c)
{
    GS_ASSERT_HELD(&hook_mu);
    for (struct capture **pp = &captures; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    /* EndCapture may come from another thread (relaxed capture mode) */
    if (atomic_load_explicit(&c->owner->captures, memory_order_relaxed) > 0)
        atomic_fetch_sub_explicit(&c->owner->captures, 1, memory_order_relaxed);
    atomic_fetch_sub(&hook_capture_count, 1);
    free(c);
    pthread_cond_broadcast(&hook_cv);
}

static void begin_leave(struct hook_thr *t, struct capture *c, CUresult r)
{
    if (r == CUDA_SUCCESS)
        return;
    pthread_mutex_lock(&hook_mu);
    if (c)
        end_locked(c);
    else {
        atomic_fetch_sub_explicit(&t->captures, 1, memory_order_relaxed);
        atomic_fetch_sub(&hook_capture_count, 1);
        pthread_cond_broadcast(&hook_cv);
    }
    pthread_mutex_unlock(&hook_mu);
}

/* After the real EndCapture, whatever it returned: the capture sequence is
 * over once EndCapture has been called on its stream. */
static void end_capture(struct hook_thr *t, CUstream s)
{
    pthread_mutex_lock(&hook_mu);
    struct capture *found = NULL;
    for (struct capture *c = captures; c; c = c->next)
        if (c->s == s && (s != CU_STREAM_PER_THREAD || c->owner == t)) {
            found = c;
            break;
        }
    if (found)
        end_locked(found);
    pthread_mutex_unlock(&hook_mu);
}

#define CAPTURE_BEGIN(abi, pt, stream, args)                                                       \
    struct hook_thr *t_ = hook_self();                                                             \
    if (!t_->nest)                                                                                 \
        hook_ready();                                                                              \
    void *real_ = hook_real_get(HOOK_IDX_##abi);                                                   \
    if (t_->nest || !real_)                                                                        \
        return real_ ? ((__typeof__(&abi))real_)args : CUDA_ERROR_NOT_FOUND;                       \
    hook_count(t_, HOOK_IDX_##abi);                                                                \
    t_->nest++;                                                                                    \
    struct capture *c_ = begin_enter(t_, hook_norm_stream(stream, pt));                            \
    CUresult r_ = ((__typeof__(&abi))real_)args;                                                   \
    begin_leave(t_, c_, r_);                                                                       \
    t_->nest--;                                                                                    \
    return r_;

#define CAPTURE_END(abi, pt, stream, args)                                                         \
    struct hook_thr *t_ = hook_self();                                                             \
    if (!t_->nest)                                                                                 \
        hook_ready();                                                                              \
    void *real_ = hook_real_get(HOOK_IDX_##abi);                                                   \
    if (t_->nest || !real_)                                                                        \
        return real_ ? ((__typeof__(&abi))real_)args : CUDA_ERROR_NOT_FOUND;                       \
    hook_count(t_, HOOK_IDX_##abi);                                                                \
    t_->nest++;                                                                                    \
    CUresult r_ = ((__typeof__(&abi))real_)args;                                                   \
    end_capture(t_, hook_norm_stream(stream, pt));                                                 \
    t_->nest--;                                                                                    \
    return r_;

HOOK_EXPORT CUresult cuStreamBeginCapture(CUstream hStream)
{
    CAPTURE_BEGIN(cuStreamBeginCapture, 0, hStream, (hStream));
}

HOOK_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    CAPTURE_BEGIN(cuStreamBeginCapture_ptsz, 1, hStream, (hStream));
}

HOOK_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    CAPTURE_BEGIN(cuStreamBeginCapture_v2, 0, hStream, (hStream, mode));
}

HOOK_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    CAPTURE_BEGIN(cuStreamBeginCapture_v2_ptsz, 1, hStream, (hStream, mode));
}

HOOK_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                 const CUgraphNode *dependencies,
                                                 const CUgraphEdgeData *dependencyData,
                                                 size_t numDependencies, CUstreamCaptureMode mode)
{
    CAPTURE_BEGIN(cuStreamBeginCaptureToGraph, 0, hStream,
                  (hStream, hGraph, dependencies, dependencyData, numDependencies, mode));
}

HOOK_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                      const CUgraphNode *dependencies,
                                                      const CUgraphEdgeData *dependencyData,
                                                      size_t numDependencies,
                                                      CUstreamCaptureMode mode)
{
    CAPTURE_BEGIN(cuStreamBeginCaptureToGraph_ptsz, 1, hStream,
                  (hStream, hGraph, dependencies, dependencyData, numDependencies, mode));
}

HOOK_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    CAPTURE_END(cuStreamEndCapture, 0, hStream, (hStream, phGraph));
}

HOOK_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    CAPTURE_END(cuStreamEndCapture_ptsz, 1, hStream, (hStream, phGraph));
}

/* A stream destroyed while capturing takes its capture with it. */
void hook_capture_forget_stream(CUstream s)
{
    pthread_mutex_lock(&hook_mu);
    for (struct capture *c = captures, *next; c; c = next) {
        next = c->next;
        if (c->s == s && !hook_stream_implicit(s))
            end_locked(c);
    }
    pthread_mutex_unlock(&hook_mu);
}

/* The child has no captures: the parent's belong to the parent's streams. */
void hook_capture_atfork_child(void)
{
    captures = NULL;
}
