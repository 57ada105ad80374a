/*
 * scheduler_holds.h - holds, queues and revokes of a session on a GPU: the
 * bookkeeping every policy (scheduler_policy.c) and every event
 * (scheduler.c) shares.  A session's hold on a GPU begins with
 * sched_holds_grant and ends when its last client grant there is released
 * (or its client dies); a revoke only asks for that.
 */
#ifndef GS_SCHEDULER_HOLDS_H
#define GS_SCHEDULER_HOLDS_H

#include "scheduler_state.h"

/* The session holds the GPU now (with a slice of quantum us, 0: none),
 * its asking clients are granted; nothing when it is not resident, asked
 * for nothing, or waits for a lower GPU of its gang. */
void sched_holds_grant(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t quantum, int boosting,
                       int64_t now);
/* Ask its clients to give the GPU back (reason for the revoke actions);
 * on every GPU of its gang too.  Nothing when it holds nothing or is
 * being revoked already. */
void sched_holds_revoke(gs_sched_t *s, sched_session_t *ss, int gpu, const char *reason,
                        int64_t now);
/* Ask a holder's grants for an idle release of `hint` us (0: the hook's
 * own): its grants are sent again when that changes. */
void sched_holds_hint(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t hint, int64_t now);

/* One client of a holding session is granted (again, with the same
 * grant_id, when it holds one). */
void sched_holds_grant_client(gs_sched_t *s, sched_client_t *c, int gpu, int64_t now);
/* The client gave its grant back: the hold ends with its last grant. */
void sched_holds_client_release(gs_sched_t *s, sched_client_t *c, int gpu, int64_t now);

/* In the GPU's queue (no-op while it holds or waits already) / out of it. */
void sched_holds_enqueue(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t now);
void sched_holds_dequeue(sess_gpu_t *g, int64_t now);
/* A waiter queued only by demand (gs_sched_demand) leaves the queue. */
void sched_holds_drop_demand(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t now);

#endif
