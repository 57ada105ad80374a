/*
 * hook_burst_ref.c - the burst monitor's clock: a reference event on a
 * stream of the hook's own whose host time (CLOCK_MONOTONIC) is known
 * within a few us, through which the GPU's timestamp of another event
 * becomes a host time (hook_burst.c measures bursts with it).
 */
#define _GNU_SOURCE
#include "hook_burst_ref.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "hook_capture.h"
#include "hook_clock.h"
#include "hook_real.h"

#define MAX_REFS    16
#define REF_POLL_NS 2000000ULL
#define REF_TRIES   8

/* A stream of the hook's own in a context, for reference events. */
struct ref {
    CUcontext ctx;
    CUstream s;
};

static pthread_mutex_t rmu = PTHREAD_MUTEX_INITIALIZER; /* leaf lock */
static struct ref refs[MAX_REFS];
static unsigned ref_gen; /* bumped when a context goes: reference events may be gone */

/* hook_gate_mu not held; the caller holds captures and teardown off.  Records a
 * timing event on the hook's own stream in ctx (created on first use) and
 * returns it with the host time of the record. */
CUevent hook_burst_ref_record(CUcontext ctx, uint64_t *ns, unsigned *gen, CUstream *stream)
{
    if (!hook_cu.streamCreate || !hook_cu.eventElapsed || !ctx)
        return NULL;
    pthread_mutex_lock(&rmu);
    CUstream s = NULL;
    int free_slot = -1;
    for (int i = 0; i < MAX_REFS; i++) {
        if (refs[i].ctx == ctx)
            s = refs[i].s;
        else if (!refs[i].ctx && free_slot < 0)
            free_slot = i;
    }
    *gen = ref_gen;
    pthread_mutex_unlock(&rmu);
    if (hook_cu.ctxSetCurrent(ctx) != CUDA_SUCCESS)
        return NULL;
    if (!s) {
        if (free_slot < 0 || hook_cu.streamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
            return NULL;
        pthread_mutex_lock(&rmu);
        refs[free_slot].ctx = ctx;
        refs[free_slot].s = s;
        pthread_mutex_unlock(&rmu);
    }
    CUevent ev;
    *stream = s;
    if (hook_cu.eventCreate(&ev, CU_EVENT_BLOCKING_SYNC) != CUDA_SUCCESS)
        return NULL;
    *ns = hook_clock_ns();
    if (hook_cu.eventRecord(ev, s) != CUDA_SUCCESS) {
        hook_cu.eventDestroy(ev);
        return NULL;
    }
    return ev;
}

int hook_burst_ref_valid(unsigned gen)
{
    pthread_mutex_lock(&rmu);
    int ok = gen == ref_gen;
    pthread_mutex_unlock(&rmu);
    return ok;
}

/* The GPU stamps a reference somewhere between its record and the moment a
 * query first finds it complete (a few us apart on an idle stream): the
 * midpoint, within half the interval.  A thread preempted meanwhile widens
 * the interval, so a scratch event is recorded up to REF_TRIES times and
 * the narrowest becomes the reference, until one is narrower than
 * HOOK_BURST_REF_GOOD_NS. */
void hook_burst_ref_settle(struct hook_burst_ref *r)
{
    if (!r->ev || !hook_cu.eventQuery)
        return;
    for (int attempt = 0; attempt < REF_TRIES && r->unc > HOOK_BURST_REF_GOOD_NS / 2; attempt++) {
        if (hook_capture_wanted())
            return; /* tried again at the next probe */
        if (!r->scratch && hook_cu.eventCreate(&r->scratch, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
            r->scratch = NULL;
            return;
        }
        uint64_t t0 = hook_clock_ns();
        if (hook_cu.eventRecord(r->scratch, r->s) != CUDA_SUCCESS)
            return;
        CUresult q;
        while ((q = hook_cu.eventQuery(r->scratch)) == CUDA_ERROR_NOT_READY &&
               hook_clock_ns() - t0 < REF_POLL_NS && !hook_capture_wanted())
            sched_yield();
        uint64_t t1 = hook_clock_ns();
        if (q == CUDA_SUCCESS && (t1 - t0) / 2 < r->unc) {
            CUevent x = r->ev;
            r->ev = r->scratch;
            r->scratch = x;
            r->ns = t0 + (t1 - t0) / 2;
            r->unc = (t1 - t0) / 2;
        } else if (q != CUDA_SUCCESS) {
            hook_cu.eventDestroy(r->scratch); /* still pending: released when complete */
            r->scratch = NULL;
            if (q != CUDA_ERROR_NOT_READY)
                return;
        }
    }
}

/* When it is old (its context still there unless gen says not). */
void hook_burst_ref_drop(struct hook_burst_ref *r)
{
    if (hook_burst_ref_valid(r->gen)) {
        hook_cu.ctxSetCurrent(r->ctx);
        if (r->ev)
            hook_cu.eventDestroy(r->ev);
        if (r->scratch)
            hook_cu.eventDestroy(r->scratch);
    }
    r->ev = r->scratch = NULL;
}

/* The host time event e completed, through the reference when it can:
 * after `recorded` (it cannot complete before it was recorded) and by
 * `observed`. */
uint64_t hook_burst_ref_event_end(const struct hook_burst_ref *r, const struct hook_streams_ev *e,
                                  uint64_t recorded, uint64_t observed)
{
    if (!r->ev || e->ctx != r->ctx)
        return observed;
    float ms;
    CUresult rc = hook_cu.eventElapsed(&ms, r->ev, e->ev);
    if (rc != CUDA_SUCCESS)
        return observed;
    double t = (double)r->ns + (double)ms * 1e6;
    if (t > (double)observed)
        return observed;
    return t < (double)recorded ? recorded : (uint64_t)t;
}

void hook_burst_ref_forget_ctx(CUcontext ctx)
{
    pthread_mutex_lock(&rmu);
    for (int i = 0; i < MAX_REFS; i++)
        if (refs[i].ctx && (!ctx || refs[i].ctx == ctx))
            refs[i].ctx = NULL;
    ref_gen++;
    pthread_mutex_unlock(&rmu);
}

void hook_burst_ref_atfork_prepare(void)
{
    pthread_mutex_lock(&rmu);
}

void hook_burst_ref_atfork_parent(void)
{
    pthread_mutex_unlock(&rmu);
}

void hook_burst_ref_atfork_child(void)
{
    pthread_mutex_init(&rmu, NULL);
    memset(refs, 0, sizeof refs);
    ref_gen++;
}
