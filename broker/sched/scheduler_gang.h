/*
 * scheduler_gang.h - a session on several GPUs holds them together and
 * takes them in GPU order: predicates on one session's state, read by the
 * holds and the policies (gs_sched_set_gang is public: scheduler.h).
 */
#ifndef GS_SCHEDULER_GANG_H
#define GS_SCHEDULER_GANG_H

#include "scheduler_state.h"

/* It may be granted gpu: it holds every lower GPU of its gang (1 when it
 * has no gang). */
int sched_gang_ready(const sched_session_t *ss, int gpu);
/* gpu is one of its gang's (0 when it has no gang): a revoke there is a
 * revoke on every GPU of the gang (sched_holds_revoke). */
int sched_gang_member(const sched_session_t *ss, int gpu);
/* Keeps the waiters of w[] that may be granted gpu now; returns how many. */
int sched_gang_filter(sched_session_t **w, int nw, int gpu);

#endif
