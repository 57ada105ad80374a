/*
 * park_victims.h - choosing and starting victims (park_victims.c).
 */
#ifndef GS_PARK_VICTIMS_H
#define GS_PARK_VICTIMS_H

#include "park_views.h"

/* Choose victims for need bytes on GPU g (not `exclude`; time-slice
 * victims with allow_switched) and start parking them (why: the log). */
gs_park_pick_rc_t park_victims(gs_park_t *p, park_views_t *vs, int g, uint64_t need,
                               const char *exclude, int allow_switched, int64_t deadline,
                               int64_t now, int64_t *wait_until, const char *why);
/* The reason of a refusal: where the memory is, or the budget. */
void park_victims_explain(gs_park_t *p, const park_views_t *vs, int g, uint64_t need,
                          const char *exclude, gs_park_pick_rc_t rc, int64_t now, char *out,
                          size_t len);

#endif
