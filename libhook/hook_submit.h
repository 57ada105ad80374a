/*
 * hook_submit.h - the submission fast path, inlined into every SUBMIT
 * wrapper (hook_wrappers.c), and its slow halves (hook_submit.c).
 *
 * With the gate open a submission sets its thread's busy flag, loads the
 * gate word (one acquire load), finds its stream in the thread's cache of
 * streams already marked in this grant, and keeps the burst flag of the
 * stream's device up to date: no read-modify-write, lock, syscall or libc
 * call.  A drain closes the gate, then runs membarrier() (an asymmetric
 * fence standing in for the fence this path leaves out), then waits for
 * every busy flag to clear, so no submission that saw the gate open can
 * slip past a drain.
 */
#ifndef GS_HOOK_SUBMIT_H
#define GS_HOOK_SUBMIT_H

#include "hook_burst.h"
#include "hook_cuda.h"
#include "hook_gate.h"
#include "hook_thread.h"

#include <stdint.h>

/* The gate was not open: returns when the caller may submit (with t->busy
 * set), after waiting for a grant if the process needs one. */
void hook_submit_slow(struct hook_thr *t, CUstream s);
/* Returns when GPU dev may run this process' work with its memory there
 * (granted, or no broker and nothing parked): for calls that are no
 * submission but need the memory back (hook_vmm_wrap.c). */
void hook_submit_wait_gpu(int dev);
/* The checkpoint tier locks this process, or did (hook_gate_frozen): its
 * driver calls would block below the hook, where no acquire can be sent.
 * Waits for a grant on every frozen device (the broker restores the
 * session first); returns at once without a broker (the restore helper
 * brings it back).  Every interposed call comes here first while frozen
 * (hook_submit_unfrozen). */
void hook_submit_thaw(void);
static inline void hook_submit_unfrozen(void)
{
    if (__builtin_expect(atomic_load_explicit(&hook_gate_frozen, memory_order_relaxed) != 0, 0))
        hook_submit_thaw();
}
/* Stream s missed the thread's cache: marks it for drains and bursts and
 * caches it for this epoch. */
void hook_submit_track_slow(struct hook_thr *t, CUstream s, unsigned long long epoch);

/* The home slot of stream s in the thread's cache.  Stream handles are
 * pointers, often allocated one after another: multiplying by 2^64 / phi
 * spreads any run of them evenly over the table (Fibonacci hashing). */
static inline unsigned hook_submit_slot(CUstream s)
{
    return (unsigned)(((uint64_t)(uintptr_t)s * 0x9E3779B97F4A7C15ULL) >> (64 - HOOK_TCACHE_BITS));
}

/* Streams are only ever added to the cache within an epoch and context
 * generation, at the first empty slot from their home, so an empty slot
 * (another epoch or generation) ends a lookup: s is not cached.  With a
 * few streams that is one slot, half a cache line, read. */
static inline void hook_submit_track(struct hook_thr *t, CUstream s)
{
    if (!atomic_load_explicit(&hook_gate_activity.v, memory_order_relaxed))
        atomic_store_explicit(&hook_gate_activity.v, 1, memory_order_relaxed);
    unsigned long long e = atomic_load_explicit(&hook_gate_epoch.v, memory_order_relaxed);
    unsigned i = hook_submit_slot(s);
    for (unsigned k = 0; k < HOOK_TCACHE_PROBES; k++, i = (i + 1) & (HOOK_TCACHE - 1)) {
        const struct hook_tcache_entry *c = &t->cache[i];
        if (c->epoch != e || c->ctx_gen != t->ctx_gen)
            break;
        if (c->s == s) {
            t->bflag = c->bflag;
            hook_burst_check(t); /* a burst starts: before the call, for its start time */
            return;
        }
    }
    hook_submit_track_slow(t, s, e);
}

/* Returns the gate word it saw (PASS: the wrapper leaves the call
 * uncounted). */
static inline int hook_submit_enter(struct hook_thr *t, CUstream s, int pt)
{
    s = hook_cuda_norm_stream(s, pt);
    atomic_store_explicit(&t->busy, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    int w = atomic_load_explicit(&hook_gate_word.v, memory_order_acquire);
    if (__builtin_expect(w == HOOK_GATE_OPEN, 1)) {
        hook_submit_track(t, s);
        return w;
    }
    t->bflag = &hook_burst_off.v;
    if (w == HOOK_GATE_UNGATED || w == HOOK_GATE_PASS)
        return w;
    atomic_store_explicit(&t->busy, 0, memory_order_release);
    hook_submit_slow(t, s);
    return w;
}

/* The burst flag is checked again after the real call: a monitor probe that
 * cleared it while this submission was on its way into the driver recorded
 * its events before this work (the driver serialises them on the stream),
 * so this submission must mark the burst active again. */
static inline void hook_submit_leave(struct hook_thr *t)
{
    atomic_store_explicit(&t->busy, 0, memory_order_release);
    hook_burst_check(t);
}

#endif
