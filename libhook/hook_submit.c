/*
 * hook_submit.c - the slow halves of a submission (the fast path is
 * hook_submit.h).
 *
 * The gate was not open: find the device of the stream, let captured work
 * through (it does not run until the graph is launched, and that launch is
 * gated), ask the broker for the device and wait on the gate's condition
 * variable until the grant arrives or the broker is lost (fail open).  The
 * wait is recorded for the notebook's wait line (hook_wait.h); when nobody
 * shows that line, a wait longer than a second prints one line saying so,
 * because ipykernel shows stderr in the notebook.
 *
 * The stream was not in the thread's cache: mark it as having work in this
 * grant (hook_streams.c: a drain or a burst probe records an event on it)
 * and remember it, with its device's burst flag, for the rest of the grant.
 */
#include "hook_submit.h"

#include "hook_capture.h"
#include "hook_client.h"
#include "hook_clock.h"
#include "hook_config.h"
#include "hook_cuctx.h"
#include "hook_drain.h"
#include "hook_init.h"
#include "hook_streams.h"
#include "hook_wait.h"
#include "gs_assert.h"
#include "log.h"

#define WAIT_NOTICE_NS 1000000000ULL

static void wait_until_locked(uint64_t deadline_ns)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    struct timespec ts = {(time_t)(deadline_ns / 1000000000ULL),
                          (long)(deadline_ns % 1000000000ULL)};
    pthread_cond_timedwait(&hook_gate_cv, &hook_gate_mu, &ts);
}

static void wait_notice_locked(struct hook_dev *d, int dev)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    if (d->wait_warned)
        return;
    d->wait_warned = 1;
    if (atomic_load_explicit(&hook_wait_quiet, memory_order_relaxed))
        return; /* the notebook's wait line says it */
    if (d->wait_info[0])
        gs_warn("waiting for GPU %d (%s)", dev, d->wait_info);
    else
        gs_warn("waiting for the GPU (held by another notebook)");
}

/* Waits until GPU dev may run this process' work with its memory there:
 * granted, or ungated (no broker) with nothing parked.  1: granted. */
static int wait_for_gpu_locked(struct hook_dev *d, int dev)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    uint64_t start = hook_clock_ns();
    int granted, waiting = 0;
    for (;;) {
        if (hook_gate_st.client == CS_UNGATED && !d->swapped) {
            granted = 0;
            break;
        }
        if (d->state == DS_GRANTED && !d->swapped) {
            granted = 1;
            break;
        }
        if (hook_drain_cancel_idle_locked(d)) {
            granted = 1; /* new work while giving the GPU back for idleness: keep it */
            break;
        }
        if (!waiting) {
            hook_wait_gate_enter_locked(d);
            waiting = 1;
        }
        uint64_t now = hook_clock_ns();
        if (d->state == DS_IDLE) {
            d->state = DS_WANT;
            d->wait_since_ns = now;
            d->wait_warned = 0;
            hook_client_kick();
        }
        uint64_t notice = start + WAIT_NOTICE_NS;
        if (now >= notice && (hook_gate_st.client == CS_READY || hook_gate_st.client == CS_REFUSED))
            wait_notice_locked(d, dev);
        d->waiters++;
        wait_until_locked(now < notice ? notice : now + WAIT_NOTICE_NS);
        d->waiters--;
    }
    if (waiting)
        hook_wait_gate_leave_locked(d);
    return granted;
}

/* A gang (hook_gate.h) waits for all of its GPUs: asked for at once (the
 * broker grants them in GPU order), and checked again after each wait,
 * since one granted earlier may have been revoked meanwhile.  1: granted. */
static int wait_for_gpus_locked(struct hook_dev *d, int dev)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    if (!hook_gate_gang)
        return wait_for_gpu_locked(d, dev);
    for (;;) {
        int asked = 0;
        for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
            struct hook_dev *e = &hook_gate_st.dev[i];
            if (e->touched && e->state == DS_IDLE) {
                e->state = DS_WANT;
                e->wait_since_ns = hook_clock_ns();
                e->wait_warned = 0;
                asked = 1;
            }
        }
        if (asked)
            hook_client_kick();
        int granted = 1, all = 1;
        for (int i = 0; i < HOOK_MAX_DEVICES; i++)
            if (hook_gate_st.dev[i].touched && !wait_for_gpu_locked(&hook_gate_st.dev[i], i))
                granted = 0;
        for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
            const struct hook_dev *e = &hook_gate_st.dev[i];
            if (e->touched && (e->state != DS_GRANTED || e->swapped))
                all = 0;
        }
        if (all || hook_gate_st.client == CS_UNGATED || hook_gate_st.client == CS_STOPPED)
            return granted;
    }
}

void hook_submit_wait_gpu(int dev)
{
    hook_init();
    if (hook_cfg.disabled)
        return;
    hook_client_touch(dev);
    pthread_mutex_lock(&hook_gate_mu);
    struct hook_dev *d = hook_gate_touch_locked(dev);
    if (d && hook_gate_st.client != CS_STOPPED)
        wait_for_gpus_locked(d, dev);
    pthread_mutex_unlock(&hook_gate_mu);
}

void hook_submit_thaw(void)
{
    if (hook_cfg.disabled)
        return;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        pthread_mutex_lock(&hook_gate_mu);
        struct hook_dev *d = &hook_gate_st.dev[i];
        if (d->frozen && hook_gate_st.client != CS_STOPPED)
            wait_for_gpus_locked(d, i); /* granted once restored; ungated without a broker */
        pthread_mutex_unlock(&hook_gate_mu);
    }
}

void hook_submit_slow(struct hook_thr *t, CUstream s)
{
    hook_init();
    if (hook_cfg.disabled)
        goto proceed;
    if (atomic_load_explicit(&hook_gate_frozen, memory_order_relaxed))
        hook_submit_thaw();
    /* Work captured into a graph runs only when the graph is launched, and
     * a thread that is capturing must never be held here: the drain that
     * closed the gate waits for its capture to end. */
    if (atomic_load_explicit(&t->captures, memory_order_relaxed) > 0)
        goto proceed;
    t->nest++;
    if (atomic_load_explicit(&hook_capture_count, memory_order_acquire) > 0 &&
        s != CU_STREAM_LEGACY && hook_cuctx_stream_capturing(s)) {
        t->nest--;
        goto proceed;
    }
    CUcontext ctx;
    int dev;
    /* Counted: a checkpoint's lock may come while this thread is in the
     * driver below; the `frozen` that comes with it then asks for the GPU
     * on its behalf (hook_client_recv.c). */
    atomic_fetch_add_explicit(&hook_gate_probing, 1, memory_order_relaxed);
    int where = hook_cuctx_stream_where(s, &ctx, &dev);
    atomic_fetch_sub_explicit(&hook_gate_probing, 1, memory_order_relaxed);
    t->nest--;
    if (where != 0)
        goto proceed; /* no context: the driver reports the error itself */
    hook_client_touch(dev);

    pthread_mutex_lock(&hook_gate_mu);
    struct hook_dev *d = hook_gate_touch_locked(dev);
    if (!d || hook_gate_st.client == CS_STOPPED) {
        pthread_mutex_unlock(&hook_gate_mu);
        goto proceed;
    }
    int granted = wait_for_gpus_locked(d, dev);
    atomic_store_explicit(&t->busy, 1, memory_order_relaxed);
    pthread_mutex_unlock(&hook_gate_mu);
    if (granted)
        hook_submit_track(t, s);
    return;
proceed:
    atomic_store_explicit(&t->busy, 1, memory_order_relaxed);
}

/* Remembers s for this epoch: in the first empty slot from its home (the
 * lookup stops at an empty slot), or, when all HOOK_TCACHE_PROBES are
 * taken, in its home slot (the stream there is marked again at its next
 * submission).  Either way every cached stream stays reachable from its
 * home without passing an empty slot. */
static struct hook_tcache_entry *cache_slot(struct hook_thr *t, CUstream s, unsigned long long e)
{
    unsigned home = hook_submit_slot(s), i = home;
    for (unsigned k = 0; k < HOOK_TCACHE_PROBES; k++, i = (i + 1) & (HOOK_TCACHE - 1)) {
        struct hook_tcache_entry *c = &t->cache[i];
        if (c->epoch != e || c->ctx_gen != t->ctx_gen || c->s == s)
            return c;
    }
    return &t->cache[home];
}

void hook_submit_track_slow(struct hook_thr *t, CUstream s, unsigned long long epoch)
{
    t->nest++; /* the driver calls below must not come back into the hook */
    int dev;
    if (hook_streams_mark(s, epoch, &dev) != 0) {
        t->bflag = &hook_burst_off.v;
        t->nest--;
        return;
    }
    struct hook_tcache_entry *c = cache_slot(t, s, epoch);
    c->s = s;
    c->epoch = epoch;
    c->ctx_gen = t->ctx_gen;
    c->bflag = hook_burst_flag_of(dev);
    t->bflag = c->bflag;
    t->nest--;
    hook_burst_check(t);
}
