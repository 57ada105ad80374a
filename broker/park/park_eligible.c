/*
 * park_eligible.c - whether a session may be parked now, whatever its
 * activity: parking on, its processes known by their credentials, the
 * GPUs it is on, a notebook (or the swap tier takes it), not exiting, not
 * just refused by the host pool.  Read by the views (park_views.c), the
 * status and gs_park_request; which tier a program outside Jupyter may use
 * (park_eligible_swap_only) by the jobs (park_jobs.c).
 */
#include <string.h>

#include "park_eligible.h"
#include "park_swap.h"

#define SEC                1000000LL
#define POOL_REFUSED_PAUSE SEC /* a swap-only session the pool refused is not picked again */

/* A notebook whose launcher (its cell watcher) is gone while its kernel
 * lives on: no cell event will come, as for a program outside Jupyter. */
static int watcher_gone(const gs_park_t *p, const char *session)
{
    const gs_session_t *s = gs_sessions_session(p->sessions, session, 0);
    return s && s->registrar_gone;
}

int park_eligible_why_not(const gs_park_t *p, const char *session, int64_t now, char *out,
                          size_t len)
{
    int pids[GS_PARK_MAX_PIDS];
    const char *why = NULL;
    gs_sched_info_t si;
    int registered = 0;
    out[0] = '\0';
    if (!p->api)
        snprintf(out, len, "parking unavailable (%s)", p->unavailable);
    else if (!p->cfg.enabled)
        snprintf(out, len, "parking is off");
    else if (park_state_session_pids(p, session, pids, GS_PARK_MAX_PIDS, &why) == 0)
        snprintf(out, len, "%s", why ? why : "no CUDA process");
    int gpus = 0, gpu = -1;
    for (int g = 0; !out[0] && g < p->ngpus; g++) {
        if (gs_sched_info(p->sched, session, g, now, &si) != 0)
            continue;
        registered |= si.registered;
        if (si.resident_bytes) {
            gpus++;
            gpu = g;
        }
        if (si.resident_bytes && p->cfg.gpu_off[g])
            snprintf(out, len, "parking is off on GPU %d", g);
    }
    if (watcher_gone(p, session))
        registered = 0; /* no cell event comes either */
    /* A program outside Jupyter has no cell to bring it back: on the swap
     * tier its hook's gate does it at its next CUDA call; a checkpointed
     * process cannot ask (doc/parking.md), so that tier needs park_plain. */
    if (!out[0] && !registered && !p->cfg.plain && !(gpus == 1 && park_swap_suits(p, session, gpu)))
        snprintf(out, len,
                 "not a notebook (park_plain is off, and its memory cannot go to the swap "
                 "tier)");
    /* Picked again at once, it would be refused again in a loop while the
     * pool pins or zeroes. */
    const psess_t *ps = zhashx_lookup(p->sess, session);
    if (!out[0] && ps && park_state_exiting(ps, now))
        snprintf(out, len, "its processes are exiting (their memory frees by itself)");
    if (!out[0] && !registered && !p->cfg.plain && ps && ps->pool_refused_at &&
        now - ps->pool_refused_at < POOL_REFUSED_PAUSE)
        snprintf(out, len,
                 "not a notebook (park_plain is off), and the host pool could not take its "
                 "memory a moment ago");
    return out[0] != '\0';
}

void park_eligible_pause_wake(gs_park_t *p, const psess_t *ps, int64_t now)
{
    if (park_state_exiting(ps, now) && ps->exiting_at + PARK_EXITING_PAUSE < p->wake)
        p->wake = ps->exiting_at + PARK_EXITING_PAUSE;
    int64_t end = ps->pool_refused_at + POOL_REFUSED_PAUSE;
    if (ps->pool_refused_at && now < end && end < p->wake)
        p->wake = end;
}

/* Outside Jupyter, and only the swap tier may park it (park_eligible_why_not). */
int park_eligible_swap_only(const gs_park_t *p, const char *session, int64_t now)
{
    gs_sched_info_t si;
    if (p->cfg.plain)
        return 0;
    if (watcher_gone(p, session))
        return 1;
    for (int g = 0; g < p->ngpus; g++)
        if (gs_sched_info(p->sched, session, g, now, &si) == 0 && si.registered)
            return 0;
    return 1;
}
