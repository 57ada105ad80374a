/*
 * hook_gate.c - the gate: may this process submit work to this GPU now?
 *
 * The fast path (hook_submit_enter in hook_internal.h) is one acquire load
 * of hook_gate_word, which is OPEN only while every device the process has
 * touched is granted.  Everything else comes here: find the device of the
 * stream, let captured work through (it does not run until the graph is
 * launched, and that launch is gated), ask the broker for the device and
 * wait on a condition variable until the grant arrives or the broker is
 * lost (fail open).  A wait longer than a second prints one line saying so,
 * because ipykernel shows stderr in the notebook.
 */
#include "hook_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "gs_assert.h"

_Atomic int hook_gate_word = HOOK_GATE_CLOSED;
_Atomic unsigned long long hook_track_epoch = 1;
_Atomic int hook_activity;
_Atomic int hook_capture_count;
_Atomic int hook_capture_want;

pthread_mutex_t hook_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t hook_cv;
struct hook_state hook_st;
static pthread_once_t cv_once = PTHREAD_ONCE_INIT;

#define WAIT_NOTICE_NS 1000000000ULL

static void cv_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&hook_cv, &a);
    pthread_condattr_destroy(&a);
}

/* hook_cv waits with CLOCK_MONOTONIC deadlines; hook_init() calls this, so
 * it is ready before anyone can wait. */
void hook_gate_init(void)
{
    pthread_once(&cv_once, cv_init);
}

static void wait_until_locked(uint64_t deadline_ns)
{
    struct timespec ts = {(time_t)(deadline_ns / 1000000000ULL),
                          (long)(deadline_ns % 1000000000ULL)};
    pthread_cond_timedwait(&hook_cv, &hook_mu, &ts);
}

void hook_gate_update_locked(void)
{
    GS_ASSERT_HELD(&hook_mu);
    int w, swapped = 0;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        swapped |= hook_st.dev[i].touched && hook_st.dev[i].swapped;
    if (hook_cfg.disabled || (hook_client_state == CS_UNGATED && !swapped))
        w = HOOK_GATE_UNGATED;
    else if (hook_client_state == CS_UNGATED)
        w = HOOK_GATE_CLOSED; /* until the memory is back */
    else {
        w = HOOK_GATE_OPEN;
        for (int i = 0; i < HOOK_MAX_DEVICES; i++)
            if (hook_st.dev[i].touched && hook_st.dev[i].state != DS_GRANTED)
                w = HOOK_GATE_CLOSED;
    }
    atomic_store_explicit(&hook_gate_word, w, memory_order_seq_cst);
}

struct hook_dev *hook_touch_locked(int dev)
{
    GS_ASSERT_HELD(&hook_mu);
    if (dev < 0 || dev >= HOOK_MAX_DEVICES)
        return NULL;
    struct hook_dev *d = &hook_st.dev[dev];
    if (!d->touched) {
        d->touched = 1;
        d->state = DS_IDLE;
        if (!d->uuid[0])
            snprintf(d->uuid, sizeof d->uuid, "GPU-unknown-%d", dev);
        hook_gate_update_locked();
    }
    return d;
}

/* A context for `dev` exists now: from here on, submissions to it pass the
 * gate only with a grant.  Called before the context is handed to the
 * program, so no submission can precede it. */
void hook_touch(int dev)
{
    hook_ready();
    if (hook_cfg.disabled)
        return;
    hook_devices_enumerate();
    pthread_mutex_lock(&hook_mu);
    hook_touch_locked(dev);
    pthread_mutex_unlock(&hook_mu);
    hook_client_start();
}

struct hook_dev *hook_dev_by_uuid_locked(const char *uuid)
{
    GS_ASSERT_HELD(&hook_mu);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        if (hook_st.dev[i].touched && strcmp(hook_st.dev[i].uuid, uuid) == 0)
            return &hook_st.dev[i];
    return NULL;
}

void hook_drain_start_locked(int dev, enum hook_drain_reason why, int kick)
{
    GS_ASSERT_HELD(&hook_mu);
    struct hook_dev *d = &hook_st.dev[dev];
    d->state = DS_DRAINING;
    d->drain_reason = why;
    d->drain_gen++;
    d->drain_pending = kick;
    hook_gate_update_locked();
    if (kick)
        hook_helper_kick_locked();
}

static void wait_notice_locked(struct hook_dev *d, int dev)
{
    GS_ASSERT_HELD(&hook_mu);
    if (d->wait_warned)
        return;
    d->wait_warned = 1;
    if (d->wait_info[0])
        gs_warn("waiting for GPU %d (%s)", dev, d->wait_info);
    else
        gs_warn("waiting for the GPU (held by another notebook)");
}

void hook_gate_slow(struct hook_thr *t, CUstream s, int pt)
{
    (void)pt;
    hook_ready();
    if (hook_cfg.disabled)
        goto proceed;
    /* Work captured into a graph runs only when the graph is launched, and
     * a thread that is capturing must never be held here: the drain that
     * closed the gate waits for its capture to end. */
    if (atomic_load_explicit(&t->captures, memory_order_relaxed) > 0)
        goto proceed;
    t->nest++;
    if (atomic_load_explicit(&hook_capture_count, memory_order_acquire) > 0 &&
        s != CU_STREAM_LEGACY && hook_stream_capturing(s)) {
        t->nest--;
        goto proceed;
    }
    CUcontext ctx;
    int dev;
    int where = hook_stream_where(s, &ctx, &dev);
    t->nest--;
    if (where != 0)
        goto proceed; /* no context: the driver reports the error itself */
    hook_touch(dev);

    pthread_mutex_lock(&hook_mu);
    struct hook_dev *d = hook_touch_locked(dev);
    int granted = 0;
    if (!d || hook_client_state == CS_STOPPED) {
        pthread_mutex_unlock(&hook_mu);
        goto proceed;
    }
    uint64_t start = hook_now_ns();
    for (;;) {
        if (hook_client_state == CS_UNGATED && !d->swapped)
            break;
        if (d->state == DS_GRANTED && !d->swapped) {
            granted = 1;
            break;
        }
        if (d->state == DS_DRAINING && d->drain_reason == DRAIN_IDLE) {
            /* New work while giving the GPU back for idleness: keep it. */
            d->state = DS_GRANTED;
            d->drain_gen++;
            hook_gate_update_locked();
            pthread_cond_broadcast(&hook_cv);
            granted = 1;
            break;
        }
        uint64_t now = hook_now_ns();
        if (d->state == DS_IDLE) {
            d->state = DS_WANT;
            d->wait_since_ns = now;
            d->wait_warned = 0;
            hook_client_kick();
        }
        uint64_t notice = start + WAIT_NOTICE_NS;
        if (now >= notice && hook_client_state == CS_READY)
            wait_notice_locked(d, dev);
        d->waiters++;
        wait_until_locked(now < notice ? notice : now + WAIT_NOTICE_NS);
        d->waiters--;
    }
    atomic_store_explicit(&t->busy, 1, memory_order_relaxed);
    pthread_mutex_unlock(&hook_mu);
    if (granted)
        hook_track(t, s);
    return;
proceed:
    atomic_store_explicit(&t->busy, 1, memory_order_relaxed);
}

/* ---- fork --------------------------------------------------------------- */

void hook_gate_atfork_prepare(void)
{
    pthread_mutex_lock(&hook_mu);
}

void hook_gate_atfork_parent(void)
{
    pthread_mutex_unlock(&hook_mu);
}

/* The child starts with no devices, no grants and no captures; the gate is
 * closed so that its first submission goes through the slow path, which
 * re-initialises lazily. */
void hook_gate_atfork_child(void)
{
    pthread_mutex_init(&hook_mu, NULL);
    cv_init();
    memset(&hook_st, 0, sizeof hook_st);
    atomic_store(&hook_capture_count, 0);
    atomic_store(&hook_capture_want, 0);
    atomic_store(&hook_activity, 0);
    atomic_fetch_add(&hook_track_epoch, 1);
    atomic_store(&hook_gate_word, hook_cfg.disabled ? HOOK_GATE_UNGATED : HOOK_GATE_CLOSED);
}
