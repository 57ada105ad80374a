/*
 * park_rates.h - what switching costs, per tier and GPU and per session
 * (park_rates.c).
 */
#ifndef GS_PARK_RATES_H
#define GS_PARK_RATES_H

#include "park_views.h"

void park_rates_init(gs_park_t *p);
/* A copy of `bytes` that took `seconds` (out: a park). */
void park_rates_measured(gs_park_t *p, psess_t *ps, int out, uint64_t bytes, double seconds);
/* Tell the scheduler how fast each session's memory would move now. */
void park_rates_tell(gs_park_t *p, const park_views_t *vs);

#endif
