/*
 * hook_capture.c - stream capture bookkeeping (the wrappers of
 * BeginCapture/EndCapture are hook_capture_wrap.c).
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
#include "hook_capture.h"

#include <stdlib.h>

#include "hook_gate.h"
#include "gs_assert.h"

struct hook_capture {
    CUstream s; /* normalised: CU_STREAM_PER_THREAD stands for this thread's */
    struct hook_thr *owner;
    struct hook_capture *next;
};
static struct hook_capture *captures; /* hook_gate_mu */

_Atomic int hook_capture_count;
_Atomic int hook_capture_want;

/* A burst monitor calling the driver gives way at once (it watches
 * hook_capture_want); a drain synchronising finishes first. */
static void wait_no_drain_locked(void)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    atomic_fetch_add(&hook_capture_want, 1);
    pthread_cond_broadcast(&hook_gate_cv);
    while (hook_gate_st.drain_syncing || hook_gate_st.monitor_active)
        pthread_cond_wait(&hook_gate_cv, &hook_gate_mu);
    atomic_fetch_sub(&hook_capture_want, 1);
}

/* Before the real BeginCapture: counts the capture as begun (so no drain
 * can start synchronising in between). */
struct hook_capture *hook_capture_begin(struct hook_thr *t, CUstream s)
{
    struct hook_capture *c = malloc(sizeof *c);
    pthread_mutex_lock(&hook_gate_mu);
    wait_no_drain_locked();
    atomic_fetch_add(&hook_capture_count, 1);
    atomic_fetch_add_explicit(&t->captures, 1, memory_order_relaxed);
    if (c) {
        c->s = s;
        c->owner = t;
        c->next = captures;
        captures = c;
    }
    pthread_mutex_unlock(&hook_gate_mu);
    return c;
}

static void end_locked(struct hook_capture *c)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    for (struct hook_capture **pp = &captures; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    /* EndCapture may come from another thread (relaxed capture mode) */
    if (atomic_load_explicit(&c->owner->captures, memory_order_relaxed) > 0)
        atomic_fetch_sub_explicit(&c->owner->captures, 1, memory_order_relaxed);
    atomic_fetch_sub(&hook_capture_count, 1);
    free(c);
    pthread_cond_broadcast(&hook_gate_cv);
}

void hook_capture_begun(struct hook_thr *t, struct hook_capture *c, CUresult r)
{
    if (r == CUDA_SUCCESS)
        return;
    pthread_mutex_lock(&hook_gate_mu);
    if (c)
        end_locked(c);
    else {
        atomic_fetch_sub_explicit(&t->captures, 1, memory_order_relaxed);
        atomic_fetch_sub(&hook_capture_count, 1);
        pthread_cond_broadcast(&hook_gate_cv);
    }
    pthread_mutex_unlock(&hook_gate_mu);
}

/* After the real EndCapture, whatever it returned: the capture sequence is
 * over once EndCapture has been called on its stream. */
void hook_capture_end(struct hook_thr *t, CUstream s)
{
    pthread_mutex_lock(&hook_gate_mu);
    struct hook_capture *found = NULL;
    for (struct hook_capture *c = captures; c; c = c->next)
        if (c->s == s && (s != CU_STREAM_PER_THREAD || c->owner == t)) {
            found = c;
            break;
        }
    if (found)
        end_locked(found);
    pthread_mutex_unlock(&hook_gate_mu);
}

/* A stream destroyed while capturing takes its capture with it. */
void hook_capture_forget_stream(CUstream s)
{
    pthread_mutex_lock(&hook_gate_mu);
    for (struct hook_capture *c = captures, *next; c; c = next) {
        next = c->next;
        if (c->s == s && !hook_cuda_stream_implicit(s))
            end_locked(c);
    }
    pthread_mutex_unlock(&hook_gate_mu);
}

/* The child has no captures: the parent's belong to the parent's streams. */
void hook_capture_atfork_child(void)
{
    captures = NULL;
    atomic_store(&hook_capture_count, 0);
    atomic_store(&hook_capture_want, 0);
}
