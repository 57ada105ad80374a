/*
 * scheduler_turns.h - switch costs, turns and idle gaps (adaptive, and the
 * turns every policy's grants begin): pure functions of one session's
 * state, below the holds and the policies.
 */
#ifndef GS_SCHEDULER_TURNS_H
#define GS_SCHEDULER_TURNS_H

#include "scheduler_state.h"

#define SCHED_SLICE_FACTOR 10 /* a turn lasts >= 10 x its switch cost */

int64_t sched_turns_switch_cost(const sess_gpu_t *g);
/* When the turn ends (0: no turn): its start + max(its slice, 10 x the
 * switch cost now, since rates and footprints change). */
int64_t sched_turns_end(const sess_gpu_t *g);
/* A turn is live until what is left of it is shorter than the holder's
 * idle release (sched_turns_idle_hint, at least 10 ms): a grant for less would
 * be a round trip for nothing. */
int sched_turns_live(const sess_gpu_t *g, int64_t now);
/* Its turn ended while it held nothing, and a switch out is due: until the
 * returned time (the turn's end + a switch cost; 0: not due) it is not
 * given a new turn ahead of a parked waiter that needs its memory, since
 * parking is about to switch it out. */
int64_t sched_turns_switch_due(const sess_gpu_t *g, int64_t now);
void sched_turns_begin(sess_gpu_t *g, int64_t slice, int64_t now);
void sched_turns_over(sess_gpu_t *g);
/* A release by itself (idle) and the acquire that ends the gap. */
void sched_turns_gap_open(const sched_session_t *ss, sess_gpu_t *g, int64_t now);
void sched_turns_gap_close(const sched_session_t *ss, sess_gpu_t *g, int64_t now);
int64_t sched_turns_idle_gap(const sess_gpu_t *g);
/* A cell starts (busy) or ends: its pause between cells is measured. */
void sched_turns_think_mark(sched_session_t *ss, int busy, int64_t now);
/* The median of its last pauses between cells; 0 while fewer than 3. */
int64_t sched_turns_think_gap(const sched_session_t *ss);
/* May be switched out now; if not, *at says when it may (or NEVER). */
int sched_turns_switchable(const sched_session_t *ss, const sess_gpu_t *g, int64_t now,
                           int64_t *at);
/* The idle release its grants ask for while a switch is wanted: 0 when
 * it cannot move. */
int64_t sched_turns_idle_hint(const sess_gpu_t *g);

#endif
