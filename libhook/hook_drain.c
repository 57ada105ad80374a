/*
 * hook_drain.c - giving a GPU back: the helper thread.
 *
 * A revoke (or idleness) closes the gate for a device at once, on the I/O
 * thread; the waiting happens here, so that the I/O thread keeps answering
 * the broker.  The helper
 *   1. makes sure no submission that saw the gate open is still on its way
 *      into the driver: membarrier() (the heavy half of an asymmetric fence;
 *      the fast path has only a compiler barrier) and then every thread's
 *      busy flag is awaited;
 *   2. waits until no stream capture is in progress and holds new captures
 *      and context teardown off, because the hook never synchronises
 *      anything while a stream of the process is capturing;
 *   3. records one event on each stream that received work since the grant
 *      and synchronises on them (hook_streams.c), with the stream's context
 *      current on this thread only;
 *   4. reports that the grant goes back (through the function the broker
 *      client set, which queues release), unless the drain was cancelled
 *      meanwhile (new work arrived during an idle release) or superseded.
 * A revoke is first tried on the I/O thread itself, spinning at most
 * ~200 us: on an idle GPU that answers at once, without waking the helper
 * (thread wake-ups cost ~100 us each in a VM).  Otherwise the helper takes
 * over and may block.
 */
#define _GNU_SOURCE
#include "hook_drain.h"

#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hook_capture.h"
#include "hook_clock.h"
#include "hook_streams.h"
#include "hook_thread.h"
#include "log.h"
#include "gs_assert.h"

static pthread_cond_t helper_cv = PTHREAD_COND_INITIALIZER;
static int helper_running; /* hook_gate_mu */
static hook_drain_report_fn report;
static int membarrier_ok = -1;
static void *ipi_page; /* for the mprotect fallback */

static void membarrier_setup(void)
{
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    membarrier_ok = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
                    syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
    if (!membarrier_ok) {
        ipi_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (ipi_page == MAP_FAILED || mlock(ipi_page, 4096) != 0) {
            if (ipi_page != MAP_FAILED)
                munmap(ipi_page, 4096);
            ipi_page = NULL;
        }
        gs_debug("membarrier(PRIVATE_EXPEDITED) unavailable: drains serialise threads with %s",
                 ipi_page ? "an mprotect TLB shootdown" : "a 1 ms pause");
    }
}

/* The process-wide barrier membarrier gives, without it: downgrading a
 * dirty, locked page's protection makes the kernel shoot down its TLB
 * entry on every CPU running this process, an IPI that serialises each of
 * them (the technique FlushProcessWriteBuffers uses on Linux). */
static int ipi_barrier(void)
{
    if (!ipi_page)
        return -1;
    *(volatile char *)ipi_page = 1;
    if (mprotect(ipi_page, 4096, PROT_READ) != 0)
        return -1;
    return mprotect(ipi_page, 4096, PROT_READ | PROT_WRITE);
}

/* Step 1: every submission that loaded the gate word as open has finished
 * entering the driver.  Returns 0 when that would mean waiting past
 * deadline_ns (0: no deadline). */
static int quiesce(uint64_t deadline_ns)
{
    if (membarrier_ok < 0)
        membarrier_setup();
    if (membarrier_ok)
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
    else if (ipi_barrier() != 0) {
        /* Without membarrier a thread's busy store may still sit in its
         * store buffer; a pause long enough for it to drain is the best
         * available (and what the kernel's fallback would do, too). */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    for (struct hook_thr *t = hook_thread_first(); t; t = t->next) {
        if (t == hook_thread_tls || t->internal)
            continue;
        while (atomic_load_explicit(&t->busy, memory_order_acquire)) {
            if (deadline_ns && hook_clock_ns() > deadline_ns)
                return 0; /* e.g. a launch blocked on a full queue */
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
    return 1;
}

void hook_drain_set_report(hook_drain_report_fn fn)
{
    report = fn;
}

/* The drain is over: the grant goes back (hook_gate_mu held). */
static void give_back_locked(struct hook_dev *d)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    if (report)
        report(d, d->drain_reason == DRAIN_IDLE ? "idle" : "revoked");
    d->state = d->waiters > 0 ? DS_WANT : DS_IDLE;
    d->given_back_id = d->grant_id;
    d->grant_id = 0;
}

/* One attempt at draining device dev for drain generation gen.  With
 * may_block, waits as long as it takes (the helper thread); without, gives
 * up after a short spin (the I/O thread, answering a revoke at once when
 * the GPU is idle, which saves two thread wake-ups).  Returns 1 when the
 * drain finished or was cancelled, 0 when it gave up. */
static int drain_attempt(int dev, unsigned gen, int may_block)
{
    uint64_t t0 = hook_clock_ns();
    uint64_t deadline = may_block ? 0 : t0 + 200000;
    if (!quiesce(deadline))
        return 0;
    uint64_t t1 = hook_clock_ns();
    pthread_mutex_lock(&hook_gate_mu);
    struct hook_dev *d = &hook_gate_st.dev[dev];
    while ((atomic_load(&hook_capture_count) > 0 || hook_gate_st.ctx_destroying > 0) &&
           d->drain_gen == gen && d->state == DS_DRAINING) {
        if (!may_block) {
            pthread_mutex_unlock(&hook_gate_mu);
            return 0;
        }
        pthread_cond_wait(&hook_gate_cv, &hook_gate_mu);
    }
    if (d->drain_gen != gen || d->state != DS_DRAINING) {
        pthread_mutex_unlock(&hook_gate_mu);
        return 1; /* cancelled */
    }
    unsigned long long since = d->epoch_start;
    hook_gate_st.drain_syncing++;
    pthread_mutex_unlock(&hook_gate_mu);

    uint64_t t2 = hook_clock_ns();
    int done = hook_streams_drain(dev, since, may_block);
    gs_debug("drain of GPU %d%s: quiesce %llu us, capture wait %llu us, streams %llu us%s", dev,
             may_block ? "" : " (inline)", (unsigned long long)(t1 - t0) / 1000,
             (unsigned long long)(t2 - t1) / 1000,
             (unsigned long long)(hook_clock_ns() - t2) / 1000, done ? "" : ", still busy");

    pthread_mutex_lock(&hook_gate_mu);
    hook_gate_st.drain_syncing--;
    if (done && d->drain_gen == gen && d->state == DS_DRAINING) {
        give_back_locked(d);
        hook_gate_update_locked();
    }
    pthread_cond_broadcast(&hook_gate_cv);
    pthread_mutex_unlock(&hook_gate_mu);
    return done;
}

static void *helper_main(void *arg)
{
    (void)arg;
    hook_thread_mark_internal();
    pthread_mutex_lock(&hook_gate_mu);
    for (;;) {
        int dev = -1;
        for (int i = 0; i < HOOK_MAX_DEVICES && dev < 0; i++)
            if (hook_gate_st.dev[i].drain_pending)
                dev = i;
        if (dev < 0) {
            pthread_cond_wait(&helper_cv, &hook_gate_mu);
            continue;
        }
        struct hook_dev *d = &hook_gate_st.dev[dev];
        d->drain_pending = 0;
        unsigned gen = d->drain_gen;
        int live = d->state == DS_DRAINING;
        pthread_mutex_unlock(&hook_gate_mu);
        if (live)
            drain_attempt(dev, gen, 1);
        pthread_mutex_lock(&hook_gate_mu);
    }
    return NULL;
}

/* Wakes (starting it if needed) the helper thread; hook_gate_mu held. */
static void kick_locked(void)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    if (!helper_running) {
        int r = hook_thread_spawn(helper_main, NULL);
        if (r != 0) {
            gs_error("cannot start the drain thread; giving GPUs back without waiting");
            for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
                struct hook_dev *d = &hook_gate_st.dev[i];
                if (!d->drain_pending)
                    continue;
                d->drain_pending = 0;
                give_back_locked(d);
            }
            hook_gate_update_locked();
            pthread_cond_broadcast(&hook_gate_cv);
            return;
        }
        helper_running = 1;
    }
    pthread_cond_signal(&helper_cv);
}

void hook_drain_start_locked(int dev, enum hook_drain_reason why, int kick)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    struct hook_dev *d = &hook_gate_st.dev[dev];
    d->state = DS_DRAINING;
    d->drain_reason = why;
    d->drain_gen++;
    d->drain_pending = kick;
    hook_gate_update_locked();
    if (kick)
        kick_locked();
}

int hook_drain_cancel_idle_locked(struct hook_dev *d)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    if (d->state != DS_DRAINING || d->drain_reason != DRAIN_IDLE)
        return 0;
    d->state = DS_GRANTED;
    d->drain_gen++;
    hook_gate_update_locked();
    pthread_cond_broadcast(&hook_gate_cv);
    return 1;
}

void hook_drain_now_or_later(int dev)
{
    pthread_mutex_lock(&hook_gate_mu);
    struct hook_dev *d = &hook_gate_st.dev[dev];
    unsigned gen = d->drain_gen;
    int live = d->state == DS_DRAINING && !d->drain_pending;
    pthread_mutex_unlock(&hook_gate_mu);
    if (!live || drain_attempt(dev, gen, 0))
        return;
    pthread_mutex_lock(&hook_gate_mu);
    if (d->drain_gen == gen && d->state == DS_DRAINING && !d->drain_pending) {
        d->drain_pending = 1;
        kick_locked();
    }
    pthread_mutex_unlock(&hook_gate_mu);
}

void hook_drain_atfork_child(void)
{
    pthread_cond_init(&helper_cv, NULL);
    helper_running = 0;
    membarrier_ok = -1; /* registration is per address space */
    if (ipi_page)
        munmap(ipi_page, 4096);
    ipi_page = NULL;
}
