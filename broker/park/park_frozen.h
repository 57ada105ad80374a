/*
 * park_frozen.h - telling a session's hooks that the checkpoint tier locks their
 * process (park_frozen.c).
 */
#ifndef GS_PARK_FROZEN_H
#define GS_PARK_FROZEN_H

#include "park_state.h"

/* The session's hooks are told that the checkpoint tier locks their
 * process (frozen) or restored it, for each GPU it has memory on
 * (ps->bytes): queued answers (park_state_answer). */
void park_frozen_tell(gs_park_t *p, const psess_t *ps, int frozen);

#endif
