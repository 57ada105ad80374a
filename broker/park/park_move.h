/*
 * park_move.h - a checkpointed session restored onto another GPU (park_move.c).
 */
#ifndef GS_PARK_MOVE_H
#define GS_PARK_MOVE_H

#include "park_views.h"

/* The GPU a checkpointed session coming back to crowded GPU g may be
 * restored onto instead (-1: none), the driver's pairs for it (their
 * count; 0: the UUIDs are unreadable), and what a finished unpark job says
 * of the move (the session's bytes follow it, its hooks are told; a
 * refusal is kept as its park_error and it is not moved again). */
int park_move_target(gs_park_t *p, const park_views_t *vs, const park_view_t *v, int g);
int park_move_pairs(const gs_park_t *p, int from, int to, gs_park_gpu_pair_t *pairs);
void park_move_finish(gs_park_t *p, psess_t *ps, const gs_park_job_t *j, int64_t now);

#endif
