/*
 * park_jobs.h - starting parks and unparks and taking their results back
 * (park_jobs.c).
 */
#ifndef GS_PARK_JOBS_H
#define GS_PARK_JOBS_H

#include "park_state.h"

/* Start parking ps (scheduler told, job submitted, or awaited while its
 * grant is revoked: PS_REVOKING); -1 when it has no process to park. */
int park_jobs_park(gs_park_t *p, psess_t *ps, const char *why, int64_t now);
/* A victim whose grant was released: its job starts. */
void park_jobs_submit(gs_park_t *p, psess_t *ps, int64_t now);
/* Start unparking ps. */
void park_jobs_unpark(gs_park_t *p, psess_t *ps, const char *why, int64_t now);
/* The GPU memory an unpark job's restore needs (gs_park_job_t's room),
 * waiting up to wait_ms for the driver to show it free. */
void park_jobs_room(const gs_park_t *p, const psess_t *ps, gs_park_job_t *j, unsigned wait_ms);
/* Take back the worker's finished jobs (gs_park_on_jobs). */
void park_jobs_collect(gs_park_t *p, int64_t now);
/* Finish the swap tier's ended phases (park_swap.h): call after each
 * park_swap_* call that may end phases. */
void park_jobs_finish_swaps(gs_park_t *p, int64_t now);

#endif
