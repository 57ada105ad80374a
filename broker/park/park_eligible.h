/*
 * park_eligible.h - may a session be parked now (park_eligible.c)?
 */
#ifndef GS_PARK_ELIGIBLE_H
#define GS_PARK_ELIGIBLE_H

#include "park_state.h"

/* Why the session cannot be parked now, whatever its activity ("managed
 * memory", "parking is off on GPU 1", ...) in out: nonzero; 0 with out
 * empty when it can. */
int park_eligible_why_not(const gs_park_t *p, const char *session, int64_t now, char *out,
                          size_t len);
/* A session the pool refused (or exiting) is not picked for a moment
 * (park_eligible_why_not); the poll looks again when that moment ends
 * (p->wake), since no event may come then: everyone idle, and the session
 * that waits for the room has asked already (after a broker restart, a
 * parked hook's only acquire). */
void park_eligible_pause_wake(gs_park_t *p, const psess_t *ps, int64_t now);
/* Outside Jupyter (no cell events: not registered, or its cell watcher is
 * gone) while park_plain is off: only the swap tier may park it. */
int park_eligible_swap_only(const gs_park_t *p, const char *session, int64_t now);

#endif
