/*
 * scheduler_phases.c - notebooks that alternate GPU and CPU phases run out
 * of phase (adaptive, while their memory fits together).
 *
 * Two cells that each compute on the GPU for G and then on the CPU for C
 * take 2G + C per round when they share the GPU in phase (both GPU phases
 * at once, each at half speed, then both CPU phases), but max(2G, G + C)
 * out of phase, one's GPU phase in the other's CPU phase.  Once apart they
 * stay apart; sharing keeps them together.  (On the H200 a 50/50 pair
 * that started together ran 1.13 x native concurrency in phase; the burst
 * policy, which takes turns, 0.96 x.)  So a running cell that alternates
 * (idle gaps measured in its cells: scheduler_turns.c) waits while another
 * one that alternates is in its GPU phase, for at most twice its bursts
 * (the hook's measured GPU bursts) and never longer than adaptive_min: a
 * phase longer than that is no phase, and the two share the GPU as before.
 * The holder is asked to give the GPU back soon after its phase ends.
 * Cells that do not alternate (a trainer, a single computation) are never
 * held back, nor hold anyone back.
 */
#include "scheduler_phases.h"

#include "scheduler_holds.h"
#include "scheduler_turns.h"

#define PHASE_HINT (10 * 1000LL) /* us: the holder's idle release meanwhile */

int sched_phases_alternate(const sched_session_t *ss, const sess_gpu_t *g)
{
    return ss->cell_busy && sched_turns_idle_gap(g) > 0;
}

/* Until when the holder's GPU phase is expected (0: unknown). */
static int64_t phase_end(const gs_sched_t *s, const sess_gpu_t *g)
{
    int64_t burst = g->p90 > g->last ? g->p90 : g->last;
    if (burst <= 0)
        return 0;
    int64_t len = 2 * burst;
    if (len > s->cfg.adaptive_min_us)
        len = s->cfg.adaptive_min_us;
    return g->hold_start + len;
}

int64_t sched_phases_wait(gs_sched_t *s, sched_session_t **h, int nh, sched_session_t **w, int nw,
                          const sched_session_t *who, int gpu, int64_t now)
{
    if (!sched_phases_alternate(who, &who->g[gpu]))
        return 0;
    int64_t until = 0;
    for (int i = 0; i < nh + nw; i++) {
        sched_session_t *o = i < nh ? h[i] : w[i - nh]; /* (waiters: granted in this decision) */
        sess_gpu_t *g = &o->g[gpu];
        if (o == who || !g->holding || g->revoking || !sched_phases_alternate(o, g))
            continue;
        int64_t end = phase_end(s, g);
        if (end <= now)
            continue;
        sched_holds_hint(s, o, gpu, PHASE_HINT, now);
        if (end > until)
            until = end;
    }
    return until;
}
