/*
 * hook_burst.c - kernel bursts: how long this process keeps a GPU busy at a
 * stretch (Gemini's "kernel burst", measured by an event-driven monitor).
 *
 * A burst of a device starts when a submission arrives while the device is
 * quiet from this process' view, and ends when everything submitted has
 * completed with nothing newer submitted.  The submit path only keeps a
 * per-device flag up to date (hook_submit.h): it loads the flag (relaxed)
 * before and after the real call and calls hook_burst_note() when the flag
 * is not ACTIVE, which happens once per burst and once per monitor probe.
 * The note of a new burst takes the start time and wakes the device's
 * monitor thread; nothing is recorded or synchronised on the program's
 * thread.
 *
 * The monitor (one thread per device, started at its first burst) first
 * watches: it sets the flag to PROBING and looks again after a pause (1/8
 * of the burst so far, 1 to 4 ms); a submission meanwhile set it back, and
 * the burst goes on without the monitor calling the driver.  After a pause
 * without submissions it probes: it records one timing event on every
 * stream of the device that got work (hook_streams_record, events from a
 * pool) and polls them until they complete.  If the flag is still PROBING
 * afterwards, nothing was submitted since the events were recorded and the
 * burst is over; otherwise it watches again.  (A probe costs the program's
 * launch loop 10-30 us of contention in the driver on an H200; watching
 * costs it one note per pause.)  A submission that was on its way into the
 * driver while the flag was cleared either precedes the event on its stream
 * or sees PROBING when it checks the flag after the call (the driver
 * serialises the two on the stream), so no work escapes a probe.
 *
 * Captures: a stream capture in global mode is invalidated by calls such as
 * cuEventQuery from any thread.  The monitor calls the driver only while no
 * capture is in progress, holds new captures off meanwhile (monitor_active)
 * and gives way at once when one wants to begin (monitor_yield), resuming
 * after it ended: its events keep their timestamps.
 *
 * The end is the GPU's timestamp of the last of those events, brought to
 * CLOCK_MONOTONIC through a reference event the monitor records on a
 * stream of its own (non-blocking, idle) and polls until it completes, so
 * its host time is known within a few us (hook_burst_ref.c); noticing the
 * end later costs no precision.  Bursts separated by less than
 * GPUSHARE_BURST_MERGE_US are merged; the last BURST_WINDOW merged bursts
 * give burst_p90_us and burst_last_us, sent with each acquire
 * (hook_client.c).
 */
#define _GNU_SOURCE
#include "hook_burst.h"
#include "hook_burst_ref.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hook_capture.h"
#include "hook_clock.h"
#include "hook_gate.h"
#include "hook_real.h"
#include "hook_streams.h"
#include "gs_assert.h"
#include "log.h"

struct hook_line_int hook_burst_flag[HOOK_MAX_DEVICES];
struct hook_line_int hook_burst_off = {HOOK_BURST_ACTIVE};

#define BURST_WINDOW   32
#define PAUSE_MIN_NS   1000000ULL
#define PAUSE_MAX_NS   4000000ULL
#define POLL_MIN_NS    20000ULL
#define POLL_MAX_NS    1000000ULL
#define FIRST_PROBE_NS 200000ULL
/* A monitor keeps watching the burst flag by itself (a tick, no wake-up
 * needed) for this long after a burst: a program that synchronises often
 * starts a burst after every synchronisation, and a futex wake-up at each
 * cost its launch loop more than everything else the hook does. */
#define WATCH_KEEP_NS 2000000000ULL
#define WATCH_TICK_NS 1000000ULL
/* The reference event is kept across bursts (making and settling one costs
 * a dozen driver calls that contend with the program's launches); the GPU
 * clock drifts from CLOCK_MONOTONIC by a few ppm, so it is renewed now and
 * then. */
#define REF_MAX_AGE_NS 10000000000ULL

struct burst_dev {
    int running;   /* monitor thread started */
    int measuring; /* a burst is being measured */
    /* The recent merged bursts; head: the latest. */
    uint64_t win_start[BURST_WINDOW], win_end[BURST_WINDOW];
    int n, head;
};

static pthread_mutex_t bmu = PTHREAD_MUTEX_INITIALIZER; /* leaf lock */
static pthread_cond_t bcv = PTHREAD_COND_INITIALIZER;
static struct burst_dev bd[HOOK_MAX_DEVICES];
/* Start of a burst the monitor has not taken yet (0: none).  Set by the
 * note of a new burst, taken by the monitor. */
static _Atomic uint64_t pending_ns[HOOK_MAX_DEVICES];
/* The monitor waits on bcv (else it ticks, or is not started: 0 below). */
static _Atomic int monitor_sleeping[HOOK_MAX_DEVICES];
static _Atomic int monitor_started[HOOK_MAX_DEVICES];
/* When the first submission after the monitor's PROBING store came (0: none
 * yet): a burst that was over by then is closed even if the monitor only
 * noticed after the new work had begun. */
static _Atomic uint64_t react_ns[HOOK_MAX_DEVICES];
/* Events kept for the next probe (bmu): creating and destroying them at
 * every probe costs the program's launches. */
#define POOL 16
static struct {
    CUcontext ctx;
    CUevent ev;
} pool[HOOK_MAX_DEVICES][POOL];
static int npool[HOOK_MAX_DEVICES];

static CUevent pool_get(int dev, CUcontext ctx)
{
    CUevent ev = NULL;
    pthread_mutex_lock(&bmu);
    for (int i = 0; i < npool[dev]; i++)
        if (pool[dev][i].ctx == ctx) {
            ev = pool[dev][i].ev;
            pool[dev][i] = pool[dev][--npool[dev]];
            break;
        }
    pthread_mutex_unlock(&bmu);
    if (!ev && hook_cu.eventCreate(&ev, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        ev = NULL;
    return ev;
}

/* ctx current on the calling thread. */
static void pool_put(int dev, CUcontext ctx, CUevent ev)
{
    pthread_mutex_lock(&bmu);
    int kept = npool[dev] < POOL;
    if (kept) {
        pool[dev][npool[dev]].ctx = ctx;
        pool[dev][npool[dev]++].ev = ev;
    }
    pthread_mutex_unlock(&bmu);
    if (!kept)
        hook_cu.eventDestroy(ev);
}

static void *monitor_main(void *arg);

static void start_monitor_locked(int dev)
{
    GS_ASSERT_HELD(&bmu);
    int r = hook_thread_spawn(monitor_main, (void *)(intptr_t)dev);
    if (r != 0)
        gs_debug("cannot start the burst monitor of GPU %d; bursts are not measured", dev);
    bd[dev].running = r == 0 ? 1 : -1;
    atomic_store(&monitor_started[dev], r == 0);
}

void hook_burst_note(struct hook_thr *t)
{
    _Atomic int *f = t->bflag;
    if (!f || f == &hook_burst_off.v)
        return;
    /* Work enqueued by a thread that is capturing becomes a graph: it runs
     * when the graph is launched (a burst of its own then). */
    if (atomic_load_explicit(&t->captures, memory_order_relaxed) > 0)
        return;
    int old = atomic_exchange(f, HOOK_BURST_ACTIVE);
    if (old == HOOK_BURST_ACTIVE)
        return;
    /* v is the line's only member: the flag's address is its line's. */
    int dev = (int)((struct hook_line_int *)f - hook_burst_flag);
    uint64_t now = hook_clock_ns();
    if (old == HOOK_BURST_PROBING) { /* the probe under way will see ACTIVE */
        uint64_t none = 0;
        atomic_compare_exchange_strong(&react_ns[dev], &none, now);
        return;
    }
    uint64_t none = 0;
    atomic_compare_exchange_strong(&pending_ns[dev], &none, now);
    /* A ticking monitor finds the burst by itself; one that sleeps stored
     * monitor_sleeping before it last looked at pending_ns (both seq_cst),
     * so either it saw the burst or this sees it asleep. */
    if (atomic_load(&monitor_started[dev]) && !atomic_load(&monitor_sleeping[dev]))
        return;
    pthread_mutex_lock(&bmu);
    if (!bd[dev].running)
        start_monitor_locked(dev);
    pthread_cond_broadcast(&bcv);
    pthread_mutex_unlock(&bmu);
}

/* ---- the window of recent bursts ---------------------------------------- */

static void add_burst(int dev, uint64_t start, uint64_t end)
{
    if (end < start)
        end = start;
    uint64_t merge_ns = (uint64_t)hook_cfg.burst_merge_us * 1000ULL;
    pthread_mutex_lock(&bmu);
    struct burst_dev *b = &bd[dev];
    if (b->n > 0 && start < b->win_end[b->head] + merge_ns) {
        if (end > b->win_end[b->head])
            b->win_end[b->head] = end; /* merged: the pause counts as part of the burst */
    } else {
        b->head = (b->head + 1) % BURST_WINDOW;
        b->win_start[b->head] = start;
        b->win_end[b->head] = end;
        if (b->n < BURST_WINDOW)
            b->n++;
    }
    gs_debug("burst on GPU %d: %llu us (merged: %llu us)", dev,
             (unsigned long long)(end - start) / 1000,
             (unsigned long long)(b->win_end[b->head] - b->win_start[b->head]) / 1000);
    pthread_mutex_unlock(&bmu);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int hook_burst_busy(int dev)
{
    if (dev < 0 || dev >= HOOK_MAX_DEVICES)
        return 0;
    pthread_mutex_lock(&bmu);
    int busy = bd[dev].measuring || atomic_load(&pending_ns[dev]) != 0 ||
               atomic_load(&hook_burst_flag[dev].v) != HOOK_BURST_QUIET;
    pthread_mutex_unlock(&bmu);
    return busy;
}

int hook_burst_stats(int dev, long long *p90_us, long long *last_us)
{
    if (dev < 0 || dev >= HOOK_MAX_DEVICES)
        return 0;
    uint64_t d[BURST_WINDOW];
    pthread_mutex_lock(&bmu);
    struct burst_dev *b = &bd[dev];
    int n = b->n;
    for (int i = 0; i < n; i++) {
        int k = (b->head - i + BURST_WINDOW) % BURST_WINDOW;
        d[i] = b->win_end[k] - b->win_start[k];
    }
    pthread_mutex_unlock(&bmu);
    if (n == 0)
        return 0;
    *last_us = (long long)(d[0] / 1000);
    qsort(d, (size_t)n, sizeof d[0], cmp_u64);
    int rank = (9 * n + 9) / 10; /* nearest rank: ceil(0.9 n) */
    *p90_us = (long long)(d[rank - 1] / 1000);
    return 1;
}

static void pause_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    nanosleep(&ts, NULL);
}

/* A context was destroyed (NULL: maybe several): its streams and events
 * went with it. */
void hook_burst_forget_ctx(CUcontext ctx)
{
    hook_burst_ref_forget_ctx(ctx);
    pthread_mutex_lock(&bmu);
    for (int d = 0; d < HOOK_MAX_DEVICES; d++) /* gone with their context */
        for (int i = 0; i < npool[d];)
            if (!ctx || pool[d][i].ctx == ctx)
                pool[d][i] = pool[d][--npool[d]];
            else
                i++;
    pthread_mutex_unlock(&bmu);
}

/* ---- the monitor -------------------------------------------------------- */

static void monitor_hold(int dev, unsigned long long *since)
{
    pthread_mutex_lock(&hook_gate_mu);
    while (hook_capture_wanted() || hook_gate_st.ctx_destroying > 0)
        pthread_cond_wait(&hook_gate_cv, &hook_gate_mu);
    hook_gate_st.monitor_active++; /* new captures wait while the driver is called */
    hook_gate_st.monitor_busy++;   /* context teardown waits until the events are done with */
    *since = hook_gate_st.dev[dev].epoch_start;
    pthread_mutex_unlock(&hook_gate_mu);
}

/* A capture wants to begin: stop calling the driver until it has ended
 * (the events keep their timestamps meanwhile).  Returns 1 if it yielded. */
static int monitor_yield(void)
{
    if (!hook_capture_wanted())
        return 0;
    pthread_mutex_lock(&hook_gate_mu);
    hook_gate_st.monitor_active--;
    pthread_cond_broadcast(&hook_gate_cv);
    while (hook_capture_wanted())
        pthread_cond_wait(&hook_gate_cv, &hook_gate_mu);
    hook_gate_st.monitor_active++;
    pthread_mutex_unlock(&hook_gate_mu);
    return 1;
}

static void monitor_done(void)
{
    pthread_mutex_lock(&hook_gate_mu);
    hook_gate_st.monitor_active--;
    hook_gate_st.monitor_busy--;
    pthread_cond_broadcast(&hook_gate_cv);
    pthread_mutex_unlock(&hook_gate_mu);
}

/* Waits for e, polling with a growing interval: a blocking wait on the
 * program's streams slows its launches down (measured on an H200), and the
 * end comes from the GPU's timestamp anyway, so noticing late costs no
 * precision. */
static CUresult wait_event(const struct hook_streams_ev *e, uint64_t *seen)
{
    uint64_t step = POLL_MIN_NS;
    CUresult r;
    for (;;) {
        monitor_yield();
        hook_cu.ctxSetCurrent(e->ctx);
        if ((r = hook_cu.eventQuery(e->ev)) != CUDA_ERROR_NOT_READY)
            break;
        pause_ns(step);
        step = step * 2 > POLL_MAX_NS ? POLL_MAX_NS : step * 2;
    }
    *seen = hook_clock_ns();
    return r;
}

/* Probes device dev until a probe finds nothing newer, recording the
 * bursts (from start on) as they end. */
/* Each device's reference, used by its monitor thread only. */
static struct hook_burst_ref refst[HOOK_MAX_DEVICES];

/* The pause between probes: 1/8 of the burst so far, 1 to 4 ms.  Work
 * queued behind a probe's events ends precisely; work submitted and
 * completed within a pause is seen at the next probe, up to a pause late. */
static uint64_t probe_pause(uint64_t start)
{
    uint64_t now = hook_clock_ns(), pause = now > start ? (now - start) / 8 : 0;
    return pause < PAUSE_MIN_NS ? PAUSE_MIN_NS : pause > PAUSE_MAX_NS ? PAUSE_MAX_NS : pause;
}

/* Watches device dev's flag for ns without calling the driver: PROBING,
 * and a submission sets it back to ACTIVE (its note; hook_submit.h).
 * Returns whether the program submitted meanwhile. */
static int still_submitting(int dev, uint64_t ns)
{
    atomic_store(&react_ns[dev], 0);
    atomic_store(&hook_burst_flag[dev].v, HOOK_BURST_PROBING);
    pause_ns(ns);
    return atomic_load(&hook_burst_flag[dev].v) == HOOK_BURST_ACTIVE;
}

static void monitor_bursts(int dev, uint64_t start)
{
    struct hook_burst_ref *r = &refst[dev];
    uint64_t end = start, merge_ns = (uint64_t)hook_cfg.burst_merge_us * 1000ULL;
    /* The note that woke this thread came from inside a launch call: the
     * first watch lets that call finish (its check after the call finds
     * PROBING and counts as submitting), so no probe starts under it. */
    uint64_t window = FIRST_PROBE_NS;
    for (;;) {
        /* A probe costs the program's launch loop 10-30 us of contention in
         * the driver (on an H200: 0.7-1 % of a launch-bound PyTorch step
         * with probes every 1-4 ms).  While the program keeps submitting,
         * its burst is not over, so the monitor only watches the flag; it
         * probes once a whole pause passed without a submission.  The cost:
         * idle gaps of the GPU shorter than a pause, while the program
         * still submits, merge into the burst (as the grant sees it: held
         * all along). */
        while (still_submitting(dev, window))
            window = probe_pause(start);
        unsigned long long since;
        monitor_hold(dev, &since);
        if (r->ev && !hook_burst_ref_valid(r->gen))
            r->ev = r->scratch = NULL; /* its context is gone, and the events with it */
        else if (r->ev && hook_clock_ns() - r->ns > REF_MAX_AGE_NS)
            hook_burst_ref_drop(r);
        atomic_store(&react_ns[dev], 0);
        atomic_store(&hook_burst_flag[dev].v, HOOK_BURST_PROBING);
        size_t n;
        uint64_t t0 = hook_clock_ns();
        struct hook_streams_ev *ev = hook_streams_record(dev, since, &n, pool_get);
        if (!r->ev && n > 0) {
            r->ctx = ev[0].ctx;
            r->ev = hook_burst_ref_record(r->ctx, &r->ns, &r->gen, &r->s);
            r->unc = UINT64_MAX; /* settled below */
        }
        uint64_t last = n ? 0 : hook_clock_ns();
        uint64_t *seen = calloc(n ? n : 1, sizeof *seen);
        CUresult *rc = calloc(n ? n : 1, sizeof *rc);
        for (size_t i = 0; seen && rc && i < n; i++)
            rc[i] = wait_event(&ev[i], &seen[i]);
        /* Settled now that the events are complete (the monitor is not in
         * a hurry then); a rough one (this thread was preempted) again. */
        if (r->ev && r->unc > HOOK_BURST_REF_GOOD_NS / 2) {
            hook_cu.ctxSetCurrent(r->ctx);
            hook_burst_ref_settle(r);
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t obs = seen ? seen[i] : hook_clock_ns();
            uint64_t e = rc && seen && rc[i] == CUDA_SUCCESS
                             ? hook_burst_ref_event_end(r, &ev[i], t0, obs)
                             : obs;
            gs_debug("probe GPU %d: recorded +%lld us, ends +%lld us, seen +%lld us, "
                     "reference +%lld +/- %lld us",
                     dev, (long long)(t0 - start) / 1000, (long long)(e - start) / 1000,
                     (long long)(obs - start) / 1000, (long long)(r->ns - start) / 1000,
                     r->unc == UINT64_MAX ? -1LL : (long long)r->unc / 1000);
            if (e > last)
                last = e;
            hook_cu.ctxSetCurrent(ev[i].ctx);
            pool_put(dev, ev[i].ctx, ev[i].ev);
        }
        free(seen);
        free(rc);
        free(ev);
        int quiet = atomic_compare_exchange_strong(&hook_burst_flag[dev].v,
                                                   &(int){HOOK_BURST_PROBING}, HOOK_BURST_QUIET);
        hook_cu.ctxSetCurrent(NULL);
        monitor_done();
        if (last > end)
            end = last;
        if (quiet) {
            add_burst(dev, start, end);
            return;
        }
        /* New work arrived meanwhile: a new burst if everything before it
         * had completed (and for long enough not to be merged anyway). */
        uint64_t react = atomic_load(&react_ns[dev]);
        gs_debug("probe GPU %d: busy again, end +%llu us, react +%llu us", dev,
                 (unsigned long long)(end - start) / 1000,
                 react ? (unsigned long long)(react - start) / 1000 : 0ULL);
        if (react && react > end + merge_ns) {
            add_burst(dev, start, end);
            start = end = react;
        }
        window = probe_pause(start);
    }
}

/* The start of the next burst: ticks while the device was active lately,
 * else sleeps until a note wakes it. */
static uint64_t next_burst(int dev, uint64_t last_active)
{
    for (;;) {
        pthread_mutex_lock(&bmu);
        uint64_t start = atomic_exchange(&pending_ns[dev], 0);
        if (start) {
            bd[dev].measuring = 1;
            pthread_mutex_unlock(&bmu);
            return start;
        }
        if (hook_clock_ns() - last_active < WATCH_KEEP_NS) {
            pthread_mutex_unlock(&bmu);
            pause_ns(WATCH_TICK_NS);
            continue;
        }
        atomic_store(&monitor_sleeping[dev], 1);
        while (!atomic_load(&pending_ns[dev]))
            pthread_cond_wait(&bcv, &bmu);
        atomic_store(&monitor_sleeping[dev], 0);
        pthread_mutex_unlock(&bmu);
    }
}

static void *monitor_main(void *arg)
{
    int dev = (int)(intptr_t)arg;
    hook_thread_mark_internal();
    for (;;) {
        monitor_bursts(dev, next_burst(dev, hook_clock_ns()));
        pthread_mutex_lock(&bmu);
        bd[dev].measuring = 0;
        pthread_mutex_unlock(&bmu);
    }
    return NULL;
}

/* ---- fork --------------------------------------------------------------- */

void hook_burst_atfork_prepare(void)
{
    pthread_mutex_lock(&bmu);
    hook_burst_ref_atfork_prepare();
}

void hook_burst_atfork_parent(void)
{
    hook_burst_ref_atfork_parent();
    pthread_mutex_unlock(&bmu);
}

/* No monitor threads in the child, and no bursts of its own yet. */
void hook_burst_atfork_child(void)
{
    pthread_mutex_init(&bmu, NULL);
    pthread_cond_init(&bcv, NULL);
    memset(bd, 0, sizeof bd);
    memset(npool, 0, sizeof npool);
    memset(refst, 0, sizeof refst);
    hook_burst_ref_atfork_child();
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        atomic_store(&hook_burst_flag[i].v, HOOK_BURST_QUIET);
        atomic_store(&react_ns[i], 0);
        atomic_store(&pending_ns[i], 0);
        atomic_store(&monitor_sleeping[i], 0);
        atomic_store(&monitor_started[i], 0);
    }
}
