/*
 * scheduler_phases.h - cells that alternate GPU and CPU phases run out of
 * phase (adaptive): asked by the policy, above the holds it hints.
 */
#ifndef GS_SCHEDULER_PHASES_H
#define GS_SCHEDULER_PHASES_H

#include "scheduler_state.h"

/* Its cell alternates (idle gaps measured in its cells). */
int sched_phases_alternate(const sched_session_t *ss, const sess_gpu_t *g);
/* Waiter `who` alternates and a holder that alternates (of h[], or of w[]
 * granted in this decision) is in its GPU phase: `who` waits until the
 * returned time, and the holder is asked to give the GPU back soon after
 * its phase; 0: grant it now. */
int64_t sched_phases_wait(gs_sched_t *s, sched_session_t **h, int nh, sched_session_t **w, int nw,
                          const sched_session_t *who, int gpu, int64_t now);

#endif
