/*
 * session_place.h - where sessions run, as the broker's state sees it:
 * the glue between the pure placement choice (placement.h, issue 18), the
 * scheduler's gangs and parking's moves.  Below the message handlers and
 * the loop (broker.c, session_dispatch.c), which call it; it calls only
 * down (placement, sessions, scheduler, inventory, gpu_access).
 *   - a hook's hello that asks where its session runs: which session (the
 *     sender's own of that name), which GPUs, and what a hello may leave
 *     behind (issue 34, item 5);
 *   - a hook's join: a session placed on several GPUs holds them together
 *     (scheduler_gang.c);
 *   - parking's moves (park_move.c): where one may go, and where it went;
 *   - a session made (it takes the placement pending for its name) and
 *     gone (its GPUs count for nobody).
 */
#ifndef GS_SESSION_PLACE_H
#define GS_SESSION_PLACE_H

#include <jansson.h>

#include "broker_state.h"

/* Pending placements one uid may hold: sessions placed by its hellos
 * that no process of it has joined (nor a launcher registered) yet. */
#define GS_PLACE_PENDING_PER_UID 64
/* How long a pending placement outlives the process that asked (its
 * session's next process gets the same answer meanwhile). */
#define GS_PLACE_PENDING_HOLD_US (10 * 60 * 1000000LL)

/* The GPUs the process of `hello` (from the sender in b->peer) is to see,
 * as a JSON array of UUIDs, or NULL: placement is off, the server has one
 * GPU, the process is not of a session, the sender has no credentials, or
 * its spawner chose (CUDA_VISIBLE_DEVICES: respected, and said).  A
 * session's later processes get its first one's answer.  Returns a new
 * reference; the caller decrefs it (or hands it on with a _new setter). */
json_t *gs_session_place_hello(gs_broker_t *b, const json_t *hello);

/* A hook of session joined (msg: its join): a session placed on several
 * GPUs is made a gang in the scheduler.  Its placement, or, when this
 * broker does not know it (it was restarted), the GPUs the joining hook
 * was placed on (`gang`: its `devices`), which are remembered as the
 * session's placement. */
void gs_session_place_join(gs_broker_t *b, const char *session, const json_t *msg);

/* Parking's move hooks (park.h gs_park_move_hooks_t; arg: the broker).
 * may_move: a parked session may be restored onto gpu: the broker placed
 * it there alone (a spawner's choice stays) and its user may run there
 * (gpu_access).  moved: it runs on `to` now; its later processes are
 * placed there too. */
int gs_session_place_may_move(void *arg, const char *session, int gpu);
void gs_session_place_moved(void *arg, const char *session, int from, int to);

/* Session id was made (session_dispatch.c): the placement a hello of its
 * name made, pending until now, is its own (placement.h). */
void gs_session_place_made(gs_broker_t *b, const char *session);
/* Session id is gone (settle.c): its placement is forgotten. */
void gs_session_place_gone(gs_broker_t *b, const char *session);

/* The placement policy's name, for status ("spread", "pack", "off"). */
const char *gs_session_place_policy_name(const gs_broker_t *b);

#endif
