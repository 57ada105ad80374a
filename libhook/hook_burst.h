/*
 * hook_burst.h - kernel bursts: the per-device flag the submission path
 * keeps (hook_submit.h), and the statistics the monitor measures.
 */
#ifndef GS_HOOK_BURST_H
#define GS_HOOK_BURST_H

#include "hook_config.h"
#include "hook_cuda.h"
#include "hook_thread.h"

#include <stdatomic.h>

/* Per device: QUIET (0) no burst; ACTIVE (1) set by submissions; PROBING (2)
 * the monitor cleared it and waits for its events.  The submit path loads
 * it (relaxed) and calls hook_burst_note only when it is not ACTIVE: once
 * per burst, and once per monitor probe while a burst lasts. */
enum { HOOK_BURST_QUIET = 0, HOOK_BURST_ACTIVE = 1, HOOK_BURST_PROBING = 2 };
/* A cache line per device: submissions to one GPU write its flag, and must
 * not take the line away from the cores submitting to another. */
extern struct hook_line_int hook_burst_flag[HOOK_MAX_DEVICES];
/* Always ACTIVE: threads not being tracked point here, and every ungated
 * submission loads it, so it has a cache line of its own. */
extern struct hook_line_int hook_burst_off;

/* The flag a submission to device dev keeps (-1: none known). */
static inline _Atomic int *hook_burst_flag_of(int dev)
{
    return dev >= 0 && dev < HOOK_MAX_DEVICES && !hook_cfg.bursts_off ? &hook_burst_flag[dev].v
                                                                      : &hook_burst_off.v;
}

void hook_burst_note(struct hook_thr *t);
static inline void hook_burst_check(struct hook_thr *t)
{
    if (__builtin_expect(atomic_load_explicit(t->bflag, memory_order_relaxed) != HOOK_BURST_ACTIVE,
                         0))
        hook_burst_note(t);
}

/* p90 and last of the device's recent (merged) bursts in us; 0 when none. */
int hook_burst_stats(int dev, long long *p90_us, long long *last_us);
int hook_burst_busy(int dev);              /* a burst is under way or being measured */
void hook_burst_forget_ctx(CUcontext ctx); /* NULL: every context */
void hook_burst_atfork_prepare(void);
void hook_burst_atfork_parent(void);
void hook_burst_atfork_child(void);

#endif
