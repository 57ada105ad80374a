/*
 * park_views.h - the sessions as parking sees them now and the estimated free
 * memory of a GPU (park_views.c).
 */
#ifndef GS_PARK_VIEWS_H
#define GS_PARK_VIEWS_H

#include "park_state.h"

/* One session as it is now: the broker's record, parking's, the
 * scheduler's view per GPU. */
typedef struct {
    gs_session_t *s;
    psess_t *ps;
    gs_sched_info_t si[GS_MAX_GPUS];
    uint64_t foot[GS_MAX_GPUS]; /* the hooks' reports */
    uint64_t host;              /* on all GPUs */
    int holding, wants, demand, cell_busy, registered;
    int64_t last_active;
    char reason[96]; /* why it cannot be parked; "" = it can */
} park_view_t;

typedef struct {
    park_view_t *v; /* malloc'd (the caller frees v); NULL without memory */
    int n;
} park_views_t;

/* Every session of the broker, with a record of parking's for each
 * (created where missing). */
park_views_t park_views(gs_park_t *p, int64_t now);
/* Forget the records of sessions the broker has forgotten. */
void park_views_prune(gs_park_t *p, const park_views_t *vs);
/* Estimated free memory of GPU g (below zero when more is promised than
 * the GPU has, which a switch's pipeline does while memory leaves). */
int64_t park_views_free_signed(const gs_park_t *p, const park_views_t *vs, int g);
uint64_t park_views_free(const gs_park_t *p, const park_views_t *vs, int g);
/* The same by the hooks' reports alone (nothing promised counted): what
 * the driver should show free, but for memory no hook has reported. */
uint64_t park_views_reported_free(const gs_park_t *p, const park_views_t *vs, int g);
/* A park that frees memory of GPU g is under way. */
int park_views_in_flight(const park_views_t *vs, int g);

#endif
