/*
 * scheduler_policy.h - the per-GPU decisions (exclusive, burst, adaptive,
 * off): called by the public API (scheduler.c) after every event and tick;
 * they call down into the holds, phases, gangs, turns and tables.
 */
#ifndef GS_SCHEDULER_POLICY_H
#define GS_SCHEDULER_POLICY_H

#include "scheduler_state.h"

/* Decide grants and revokes on one GPU; returns when it wants to decide
 * again (> now, or GS_SCHED_NEVER). */
int64_t sched_policy_decide(gs_sched_t *s, int gpu, int64_t now);

#endif
