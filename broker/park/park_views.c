/*
 * park_views.c - the sessions as parking sees them now (park_views: one
 * pass over the broker's tables, the scheduler's view of each session, why
 * it cannot be parked) and the estimated free memory of a GPU.
 *
 * Free memory is estimated from the hooks' reports: the GPU's size less
 * the footprints of sessions not parked, the room promised to requests
 * answered and not yet reported and the memory of processes dropped while
 * they run on.  The broker never creates a CUDA context; what it learns
 * from the driver comes from NVML (gpu_free.h), asked by a request whose
 * allocation failed where the estimate had room (park_room.c) and before
 * a restore (park_worker.c).  Memory outside gpushare and the contexts are
 * in no report.
 */
#include <string.h>

#include "park_eligible.h"
#include "park_swap.h"
#include "park_views.h"

park_views_t park_views(gs_park_t *p, int64_t now)
{
    park_views_t vs = {NULL, 0};
    size_t cap = 16;
    vs.v = calloc(cap, sizeof *vs.v);
    for (gs_session_t *s = gs_sessions_first_session(p->sessions); s && vs.v;
         s = gs_sessions_next_session(p->sessions)) {
        if ((size_t)vs.n == cap) {
            park_view_t *nv = realloc(vs.v, 2 * cap * sizeof *nv);
            if (!nv)
                break;
            vs.v = nv;
            cap *= 2;
        }
        park_view_t *v = &vs.v[vs.n];
        memset(v, 0, sizeof *v);
        v->s = s;
        if (!(v->ps = park_state_sess(p, s->id, 1)))
            continue;
        for (int g = 0; g < p->ngpus; g++) {
            gs_sched_info_t *si = &v->si[g];
            if (gs_sched_info(p->sched, s->id, g, now, si) != 0)
                continue;
            v->foot[g] = si->resident_bytes;
            v->host += si->resident_bytes;
            v->holding |= si->state == GS_SESS_RUNNING;
            v->wants |= si->wants;
            v->demand |= si->demand;
            v->cell_busy = si->cell_busy;
            v->registered = si->registered;
            if (si->last_active_us > v->last_active)
                v->last_active = si->last_active_us;
        }
        vs.n++;
    }
    for (int i = 0; i < vs.n; i++) { /* this iterates the client table */
        park_eligible_why_not(p, vs.v[i].s->id, now, vs.v[i].reason, sizeof vs.v[i].reason);
        park_eligible_pause_wake(p, vs.v[i].ps, now);
    }
    return vs;
}

/* Forget the records of sessions the broker has forgotten. */
void park_views_prune(gs_park_t *p, const park_views_t *vs)
{
    zlistx_t *gone = zlistx_new();
    for (psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess)) {
        int seen = 0;
        for (int i = 0; i < vs->n && !seen; i++)
            seen = vs->v[i].ps == ps;
        if (!seen && !ps->job)
            zlistx_add_end(gone, ps->id);
    }
    for (char *id = zlistx_first(gone); id; id = zlistx_next(gone))
        zhashx_delete(p->sess, id);
    zlistx_destroy(&gone);
}

/* promised: also what is promised and not yet reported (sessions coming
 * back, answered make_room requests). */
static int64_t free_of(const gs_park_t *p, const park_views_t *vs, int g, int promised)
{
    int64_t left = (int64_t)p->total[g];
    for (int i = 0; i < vs->n; i++) {
        const psess_t *ps = vs->v[i].ps;
        if (ps->st == PS_PARKED) {
            /* Parked in part: what did not go out is still on the GPU. */
            if (ps->partial && vs->v[i].foot[g] > ps->bytes[g])
                left -= (int64_t)(vs->v[i].foot[g] - ps->bytes[g]);
            continue;
        }
        /* One coming back counts with all it brings, not with what its
         * hook reported so far: two sessions let in on the same room (one
         * of them through a switch's pipeline) ran out of memory. */
        uint64_t foot = vs->v[i].foot[g];
        if (promised && ps->st == PS_UNPARKING && ps->bytes[g] > foot)
            foot = ps->bytes[g];
        left -= (int64_t)foot;
    }
    for (int i = 0; promised && i < p->nresv; i++)
        if (p->resv[i].gpu == g)
            left -= (int64_t)p->resv[i].bytes;
    /* A process dropped while it runs on still holds its memory; the
     * scheduler no longer counts it. */
    left -= (int64_t)park_swap_held_used(p, g);
    return left;
}

int64_t park_views_free_signed(const gs_park_t *p, const park_views_t *vs, int g)
{
    return free_of(p, vs, g, 1);
}

uint64_t park_views_reported_free(const gs_park_t *p, const park_views_t *vs, int g)
{
    int64_t left = free_of(p, vs, g, 0);
    return left > 0 ? (uint64_t)left : 0;
}

uint64_t park_views_free(const gs_park_t *p, const park_views_t *vs, int g)
{
    int64_t left = park_views_free_signed(p, vs, g);
    return left > 0 ? (uint64_t)left : 0;
}

int park_views_in_flight(const park_views_t *vs, int g)
{
    for (int i = 0; i < vs->n; i++) {
        const psess_t *ps = vs->v[i].ps;
        if ((ps->st == PS_REVOKING || ps->st == PS_PARKING) && ps->bytes[g])
            return 1;
    }
    return 0;
}
