/*
 * park_swap.h - the swap tier (park_swap.c).  Its swap_out and swap_in go
 * to the hooks through the answer queue (park_state_answer), like
 * make_room's answers.  A phase (swap_out, its rollback, swap_in) that
 * ends is not finished here: it is queued as a finished job
 * (gs_park_job_t, on p->swap_done) that the caller hands to
 * park_jobs_finish_swaps (park_jobs.h), which does the bookkeeping common
 * to both tiers.  Every function below that says "may end phases" may
 * queue such jobs.
 */
#ifndef GS_PARK_SWAP_H
#define GS_PARK_SWAP_H

#include "park_state.h"

int park_swap_available(const gs_park_t *p);
/* Every process of the session can swap its memory on GPU g, and what
 * cannot move is small: the swap tier would take it (if the pool can lend
 * the host memory then). */
int park_swap_suits(const gs_park_t *p, const char *session, int g);
/* The swap tier could park the session in part on GPU g now: it suits
 * the tier and one process moves its memory there. */
int park_swap_can_part(gs_park_t *p, const char *session, int g);
/* Parks ps on the swap tier if it qualifies and the pool can lend: 1
 * started; 2 waiting for the pool, which is pinning or zeroing what it
 * lacks (ps is PS_REVOKING again: tried at each poll, at most
 * POOL_WAIT_MAX); 0 nothing done: the checkpoint tier takes it. */
int park_swap_try_park(gs_park_t *p, psess_t *ps, int64_t now);
/* Brings ps back from the swap tier; may end phases (nobody holds memory
 * out: it is back at once). */
void park_swap_unpark(gs_park_t *p, psess_t *ps, int64_t now);
/* An unpark that failed before its swap_in began (the disk tier could not
 * bring ps's memory back into chunks): queued as a finished phase. */
void park_swap_unpark_failed(gs_park_t *p, psess_t *ps, const char *why);
/* Deadlines of the conversations under way; may end phases. */
void park_swap_check(gs_park_t *p, int64_t now);
/* c goes; unless it exited, what its process holds while it lives on is
 * held for it (held_proc_t); may end phases. */
void park_swap_client_gone(gs_park_t *p, pclient_t *c, int exited, int64_t now);
/* c (just joined) takes over what is held for its process. */
void park_swap_client_back(gs_park_t *p, pclient_t *c, int64_t now);
/* Whether a process of the session still holds host memory (a lease, or
 * one held for it). */
int park_swap_session_holds(const gs_park_t *p, const char *session);
/* A hook reports memory still in host memory while its session is not
 * parked on the swap tier (a swap its broker lost track of): the session
 * counts as parked there, so that its next unpark brings it back. */
void park_swap_reported_out(gs_park_t *p, pclient_t *c, int gpu, uint64_t swapped, int64_t now);
/* The same for every process of ps that last reported memory out, once a
 * park or unpark of ps ends with it resident: a checkpoint restore brings
 * back what was on the GPU, not what a hook had moved to host memory. */
void park_swap_still_out(gs_park_t *p, psess_t *ps, int64_t now);
/* Frees what is held for dropped processes and the phases not finished
 * (shutdown). */
void park_swap_free_held(gs_park_t *p);
/* The oldest phase that ended (the caller frees it), or NULL. */
gs_park_job_t *park_swap_next_done(gs_park_t *p);
/* Device memory of GPU g held by dropped processes that live on. */
uint64_t park_swap_held_used(const gs_park_t *p, int g);
/* Return what dropped processes that are gone held (every second). */
void park_swap_check_held(gs_park_t *p, int64_t now);
/* A hook's `swapped` (gs_park_on_swapped); may end phases. */
void park_swap_answered(gs_park_t *p, pclient_t *c, int gpu, const json_t *msg, int64_t now);
/* Host bytes the session room_for would free on GPU g while a session
 * goes out to make room for it (the switch's relay; 0: none). */
uint64_t park_swap_relayable(gs_park_t *p, const char *room_for, int g);
/* Bytes of GPU gpu that swap-tier parks under way are giving back. */
uint64_t park_swap_leaving(const gs_park_t *p, int gpu);
/* The pools' targets from what is parked and who holds memory. */
void park_swap_targets(gs_park_t *p);

#endif
