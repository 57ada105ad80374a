/*
 * scheduler_policy.c - the decisions: on one GPU, who gets it now, who has
 * to give it back, and when to look again.  Called after every event and
 * at every deadline; each function returns a wake time strictly after now
 * (or GS_SCHED_NEVER), so the broker's loop never spins.
 *
 * A session "holds" a GPU from its grant until all its clients released;
 * a revoked holder still holds (its work drains) and the GPU is handed on
 * only when it has let go, so exclusive policies never overlap work.
 */
#include "scheduler_policy.h"

#include "scheduler_gang.h"
#include "scheduler_holds.h"
#include "scheduler_phases.h"
#include "scheduler_turns.h"

#include <math.h>
#include <stdlib.h>

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* After a policy change (or the scheduler turned on) several sessions may
 * hold a GPU that now allows one: the oldest hold keeps it. */
static void keep_one_holder(gs_sched_t *s, int gpu, sched_session_t **h, int nh, int64_t now)
{
    int kept = 0;
    for (int i = 0; i < nh; i++) {
        if (h[i]->g[gpu].revoking)
            continue;
        if (kept)
            sched_holds_revoke(s, h[i], gpu, "policy", now);
        kept = 1;
    }
}

static void end_boosts(sched_session_t **h, int nh, int gpu, int64_t now)
{
    for (int i = 0; i < nh; i++) {
        sess_gpu_t *g = &h[i]->g[gpu];
        if (g->boosting)
            sched_state_boost_count(g, 0, now);
    }
}

/* ---- off: grant everything, revoke nothing --------------------------------- */

static int64_t decide_off(gs_sched_t *s, int gpu, sched_session_t **h, int nh, sched_session_t **w,
                          int nw, int64_t now)
{
    end_boosts(h, nh, gpu, now);
    for (int i = 0; i < nw; i++)
        sched_holds_grant(s, w[i], gpu, 0, 0, now);
    return GS_SCHED_NEVER;
}

/* ---- exclusive: the thesis' lock -------------------------------------------- */

static int64_t decide_exclusive(gs_sched_t *s, int gpu, sched_session_t **h, int nh,
                                sched_session_t **w, int nw, int64_t now)
{
    end_boosts(h, nh, gpu, now);
    keep_one_holder(s, gpu, h, nh, now);
    if (nh == 0) {
        if (nw == 0)
            return GS_SCHED_NEVER;
        /* A session whose turn goes on (it gave the GPU back between two
         * GPU phases) has it again at once, before the queue: its turn
         * keeps it from being switched out for a parked waiter anyway, and
         * that waiter, first in the queue, would wait for it while it
         * waited for the waiter (20 s lost per turn on the H200). */
        sched_session_t *next = NULL;
        for (int i = 0; i < nw && !next; i++)
            if (sched_turns_live(&w[i]->g[gpu], now) && sched_state_grantable(s, w[i], gpu))
                next = w[i];
        /* A parked (or moving) head comes back through parking, which
         * needs room from the holder it would follow; it does not hold up
         * a resident waiter behind it meanwhile (that one would wait for
         * it while parking switched it out: a switch more than needed). */
        for (int i = 0; i < nw && !next; i++)
            if (w[i]->residency == GS_SCHED_RESIDENT)
                next = w[i];
        next = next ? next : w[0];
        sched_holds_grant(s, next, gpu, s->cfg.tq_us, 0, now);
        if (nw == 1)
            return GS_SCHED_NEVER;
        return next->g[gpu].holding ? next->g[gpu].deadline : GS_SCHED_NEVER;
    }
    sess_gpu_t *g = &h[0]->g[gpu];
    if (g->revoking || nw == 0 || nh > 1)
        return GS_SCHED_NEVER; /* a release or an acquire brings us back */
    /* A parked waiter comes in by a switch, which waits for the holder to
     * go idle: the holder gives the GPU back soon after it does (as under
     * adaptive).  With the default 200 ms a 4 GiB 50/50 pair on the H200
     * idled 0.2 s of each 0.9 s phase before every switch. */
    for (int i = 0; i < nw; i++)
        if (w[i]->residency != GS_SCHED_RESIDENT) {
            sched_holds_hint(s, h[0], gpu, sched_turns_idle_hint(g), now);
            break;
        }
    if (now >= g->deadline) {
        sched_holds_revoke(s, h[0], gpu, "quantum", now);
        return GS_SCHED_NEVER;
    }
    return g->deadline;
}

/* ---- burst: Gemini's dynamic quota and request/limit shares ----------------- */

static int64_t burst_quota(const gs_sched_config_t *cfg, sess_gpu_t *g)
{
    /* Before its first quota a session's tau_last is the base quota. */
    double tau = (double)(g->tau ? g->tau : cfg->quota_base_us);
    if (g->stats_new) {
        double p90 = (double)(g->p90 >= 0 ? g->p90 : g->last);
        double last = (double)(g->last >= 0 ? g->last : g->p90);
        double kb = cfg->alpha * p90 + (1.0 - cfg->alpha) * last;
        tau = cfg->beta * tau + (1.0 - cfg->beta) * kb;
        g->stats_new = 0;
    }
    g->tau = clamp64((int64_t)llround(tau), cfg->quota_min_us, cfg->quota_max_us);
    return g->tau;
}

/* A limit below 1 is hard: at or over it a session waits, even when the GPU
 * would otherwise idle. */
static int over_limit(const gs_sched_t *s, const sched_session_t *ss, int gpu, int64_t now)
{
    double req, lim;
    sched_state_shares(s, ss->id, &req, &lim);
    if (lim >= 1.0)
        return 0;
    int64_t used = sched_state_window_used(&ss->g[gpu], now, s->cfg.window_us);
    return (double)used >= lim * (double)s->cfg.window_us;
}

/* When a waiting session over its limit drops below it: the window's start
 * has to move past `excess` of its past holds. */
static int64_t below_limit_at(const gs_sched_t *s, const sched_session_t *ss, int gpu, int64_t now)
{
    double req, lim;
    sched_state_shares(s, ss->id, &req, &lim);
    const sess_gpu_t *g = &ss->g[gpu];
    int64_t W = s->cfg.window_us, from = now - W;
    int64_t excess = sched_state_window_used(g, now, W) - (int64_t)floor(lim * (double)W) + 1;
    for (int i = 0; i < g->nhist; i++) {
        int64_t a = g->hist[i].start > from ? g->hist[i].start : from;
        int64_t b = g->hist[i].end < now ? g->hist[i].end : now;
        if (b <= a)
            continue;
        if (excess <= b - a)
            return now + (a + excess - from);
        excess -= b - a;
    }
    return now + W; /* not reached: the window forgets everything by then */
}

/* The slice a burst holder gets: its quota, cut so that a limit below 1 is
 * overrun by less than quota_min. */
static int64_t burst_slice(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t now, int fresh)
{
    sess_gpu_t *g = &ss->g[gpu];
    int64_t q = fresh || !g->tau ? burst_quota(&s->cfg, g) : g->tau;
    double req, lim;
    sched_state_shares(s, ss->id, &req, &lim);
    if (lim < 1.0) {
        int64_t room = (int64_t)(lim * (double)s->cfg.window_us) -
                       sched_state_window_used(g, now, s->cfg.window_us);
        q = min64(q, room > s->cfg.quota_min_us ? room : s->cfg.quota_min_us);
    }
    return q;
}

/* Gemini's order: below their request first (farthest below first), then
 * below their limit (farthest below first); arrival order breaks ties. */
static sched_session_t *burst_pick(gs_sched_t *s, int gpu, sched_session_t **w, int nw, int64_t now)
{
    sched_session_t *best = NULL;
    int best_tier = 0;
    double best_gap = 0;
    for (int i = 0; i < nw; i++) {
        if (over_limit(s, w[i], gpu, now))
            continue;
        double req, lim;
        sched_state_shares(s, w[i]->id, &req, &lim);
        double u = (double)sched_state_window_used(&w[i]->g[gpu], now, s->cfg.window_us) /
                   (double)s->cfg.window_us;
        int tier = u < req ? 2 : 1;
        double gap = tier == 2 ? req - u : lim - u;
        if (!best || tier > best_tier || (tier == best_tier && gap > best_gap + 1e-12)) {
            best = w[i];
            best_tier = tier;
            best_gap = gap;
        }
    }
    return best;
}

static int64_t decide_burst(gs_sched_t *s, int gpu, sched_session_t **h, int nh,
                            sched_session_t **w, int nw, int64_t now)
{
    end_boosts(h, nh, gpu, now);
    keep_one_holder(s, gpu, h, nh, now);
    if (nh > 0) {
        sched_session_t *ss = h[0];
        sess_gpu_t *g = &ss->g[gpu];
        if (g->revoking || nh > 1)
            return GS_SCHED_NEVER;
        if (now < g->deadline)
            return g->deadline;
        int eligible = 0;
        for (int i = 0; i < nw; i++)
            eligible |= !over_limit(s, w[i], gpu, now);
        if (eligible || over_limit(s, ss, gpu, now)) {
            sched_holds_revoke(s, ss, gpu, "quantum", now);
            return GS_SCHED_NEVER;
        }
        /* Nobody else may go: the holder keeps the GPU for another slice. */
        g->quantum = burst_slice(s, ss, gpu, now, g->stats_new);
        g->deadline = now + g->quantum;
        return g->deadline;
    }
    sched_session_t *pick = burst_pick(s, gpu, w, nw, now);
    if (pick) {
        sched_holds_grant(s, pick, gpu, burst_slice(s, pick, gpu, now, 1), 0, now);
        return pick->g[gpu].deadline;
    }
    int64_t wake = GS_SCHED_NEVER;
    for (int i = 0; i < nw; i++)
        wake = min64(wake, below_limit_at(s, w[i], gpu, now));
    return wake;
}

/* ---- adaptive: share while memory fits, slice when not, boost new cells ---- */

/* Slices grow with the GPU time the running cell (without cells: the busy
 * period) has had: a cell that has computed for t gets slices of t, within
 * [adaptive_min, adaptive_max].  Short cells switch often and stay
 * responsive; a long training cell is not interrupted needlessly. */
static int64_t adaptive_slice(const gs_sched_t *s, const sched_session_t *ss, int gpu, int64_t now)
{
    const sess_gpu_t *g = &ss->g[gpu];
    int64_t had = g->gpu_time + (g->holding ? now - g->hold_start : 0) - g->gpu_mark;
    return clamp64(had, s->cfg.adaptive_min_us, s->cfg.adaptive_max_us);
}

/* A grant under adaptive: the session's turn goes on (it gave the GPU back
 * by itself between two GPU phases), or a new turn begins with the
 * adaptive slice; either way the hold ends with the turn, which lasts at
 * least 10 x the session's switch cost (scheduler_turns.c). */
static void adaptive_grant(gs_sched_t *s, sched_session_t *ss, int gpu, int boosting, int64_t now)
{
    sess_gpu_t *g = &ss->g[gpu];
    if (!sched_state_grantable(s, ss, gpu)) {
        sched_holds_grant(s, ss, gpu, 0, boosting, now); /* keeps or drops its place */
        return;
    }
    if (!sched_turns_live(g, now))
        sched_turns_begin(g, adaptive_slice(s, ss, gpu, now), now);
    sched_holds_grant(s, ss, gpu, sched_turns_end(g) - now, boosting, now);
}

/* Holders' deadlines follow their turns: a switch cost measured after the
 * grant (parking learns rates as it copies) lengthens the turn. */
static void adaptive_deadlines(sched_session_t **h, int nh, int gpu)
{
    for (int i = 0; i < nh; i++) {
        sess_gpu_t *g = &h[i]->g[gpu];
        if (g->turn_start && !g->revoking) {
            g->deadline = sched_turns_end(g);
            g->quantum = g->deadline - g->turn_start;
        }
    }
}

/* A parked session is not boosted while it is brought back: preempting the
 * holders for seconds of copying would only idle the GPU. */
static int boost_eligible(const gs_sched_t *s, const sched_session_t *ss, int gpu)
{
    const sess_gpu_t *g = &ss->g[gpu];
    return ss->cell_busy && g->boost_left > 0 &&
           ((g->waiting && sched_state_grantable(s, ss, gpu)) || (g->holding && !g->revoking));
}

static int fits(const gs_sched_t *s, int gpu, uint64_t bytes)
{
    if (!s->mem_total[gpu])
        return 1;
    double room = (double)s->mem_total[gpu] * (1.0 - s->cfg.headroom);
    return (double)bytes <= room;
}

/* The interactive boost: cells with boost left (each has boost_ms of
 * holding from its start) hold the GPU together, as far as their memory
 * fits, and everyone else is revoked and held back until none is left.
 * They share it with each other (the GPU time-slices between them)
 * instead of taking turns in the order they started: in turns, a short
 * cell waited for the whole work of every cell started before it, which
 * made the tail of 8 mostly idle notebooks 13 x their solo time (doc/
 * scheduling.md).  A boosted cell is granted at once, while the holders
 * it preempts drain, when their memory fits together: its first kernels
 * share the GPU with what they had queued instead of waiting for it.
 * Returns 1 while a boost holds the GPU (nothing else is decided); *wake
 * is set to the first boost's end. */
static int adaptive_boost(gs_sched_t *s, int gpu, sched_session_t **h, int nh, sched_session_t **w,
                          int nw, int64_t now, int64_t *wake)
{
    int nb = 0;
    *wake = GS_SCHED_NEVER;
    for (int i = 0; i < nh; i++) {
        sess_gpu_t *g = &h[i]->g[gpu];
        if (g->boosting && (!h[i]->cell_busy || sched_state_boost_left(g, now) <= 0 || g->revoking))
            end_boosts(&h[i], 1, gpu, now);
    }
    for (int i = 0; i < nh + nw; i++) {
        sched_session_t *c = i < nh ? h[i] : w[i - nh];
        nb += boost_eligible(s, c, gpu);
    }
    if (!nb)
        return 0;
    /* When the boosts left end within a tenth of a boost, a holder is not
     * preempted for them: its drain would outlast what they gain.  (Two
     * cells that start together share a boost; the first to start ran out
     * of it 2 ms before the other, and its drain of 235 ms, then its grant
     * again, cost a 50/50 pair on the H200 a quarter of a second.) */
    int64_t last_end = now;
    for (int i = 0; i < nh + nw; i++) {
        sched_session_t *c = i < nh ? h[i] : w[i - nh];
        if (boost_eligible(s, c, gpu) &&
            now + sched_state_boost_left(&c->g[gpu], now) * nb > last_end)
            last_end = now + sched_state_boost_left(&c->g[gpu], now) * nb;
    }
    int spare = last_end - now <= s->cfg.boost_us / 10;
    uint64_t used = 0;
    for (int i = 0; i < nh; i++) {
        if (!boost_eligible(s, h[i], gpu) && !spare)
            sched_holds_revoke(s, h[i], gpu, "preempt", now);
        used += sched_state_footprint(s, h[i], gpu);
    }
    for (int i = 0; i < nw; i++) {
        if (!boost_eligible(s, w[i], gpu) || w[i]->g[gpu].holding)
            continue;
        uint64_t need = sched_state_footprint(s, w[i], gpu);
        if (!fits(s, gpu, used + need))
            continue;
        adaptive_grant(s, w[i], gpu, 1, now);
        used += need;
    }
    /* Their boosts are GPU time: shared by the boosted cells that hold. */
    int share = 0;
    for (int i = 0; i < nh + nw; i++) {
        sched_session_t *c = i < nh ? h[i] : w[i - nh];
        share += c->g[gpu].holding && boost_eligible(s, c, gpu);
    }
    for (int i = 0; i < nh + nw; i++) {
        sched_session_t *c = i < nh ? h[i] : w[i - nh];
        sess_gpu_t *g = &c->g[gpu];
        if (!g->holding || !boost_eligible(s, c, gpu))
            continue;
        sched_state_boost_count(g, share, now);
        if (g->boost_start + g->boost_left * share < *wake)
            *wake = g->boost_start + g->boost_left * share;
    }
    return 1;
}

/* When a holder's turn ends for the blocked waiter.  A cell that has just
 * started (boost left: someone waits for its result) and does not fit
 * takes what it needs, a switch: the holder's turn is cut to the shortest
 * a switch allows, max(adaptive_min, 10 x its switch cost), instead of
 * the slice its long cell has grown to (up to adaptive_max). */
static int64_t interactive_end(const gs_sched_t *s, const sched_session_t *blocked,
                               const sess_gpu_t *g, int gpu)
{
    const sess_gpu_t *b = &blocked->g[gpu];
    if (!blocked->cell_busy || b->boost_left <= 0 || !g->turn_start)
        return g->deadline;
    int64_t floor = SCHED_SLICE_FACTOR * sched_turns_switch_cost(g);
    int64_t shortest =
        g->turn_start + (floor > s->cfg.adaptive_min_us ? floor : s->cfg.adaptive_min_us);
    return shortest < g->deadline ? shortest : g->deadline;
}

static int64_t decide_adaptive(gs_sched_t *s, int gpu, sched_session_t ***hp, int nh,
                               sched_session_t **w, int nw, int64_t now)
{
    sched_session_t **h = *hp;
    int64_t wake = GS_SCHED_NEVER;
    adaptive_deadlines(h, nh, gpu);
    if (adaptive_boost(s, gpu, h, nh, w, nw, now, &wake))
        return wake;
    uint64_t used = 0;
    for (int i = 0; i < nh; i++)
        used += sched_state_footprint(s, h[i], gpu);
    int held = nh;
    /* A session whose turn goes on is granted again at once, before the
     * queue: whoever waits for its memory waits for its turn to end anyway,
     * and switching it out between two GPU phases costs a switch. */
    for (int i = 0; i < nw; i++) {
        uint64_t need = sched_state_footprint(s, w[i], gpu);
        if (!sched_turns_live(&w[i]->g[gpu], now) || !sched_state_grantable(s, w[i], gpu) ||
            (held > 0 && !fits(s, gpu, used + need)) ||
            sched_phases_wait(s, h, nh, w, nw, w[i], gpu, now))
            continue;
        adaptive_grant(s, w[i], gpu, 0, now);
        used += need;
        held++;
    }
    /* A parked (or moving) waiter comes back through parking, which
     * switches someone out for it; it does not hold up the resident
     * waiters behind it (they would wait for it while it waits for their
     * memory: two notebooks that do not fit took turns being unparked and
     * never ran), but holders' turns end for the first of them. */
    sched_session_t *blocked = NULL, *parked = NULL;
    for (int i = 0; i < nw && !parked; i++)
        if (w[i]->residency != GS_SCHED_RESIDENT)
            parked = w[i];
    for (int i = 0; i < nw; i++) {
        if (w[i]->g[gpu].holding || w[i]->residency != GS_SCHED_RESIDENT)
            continue; /* its turn went on, or it comes back through parking */
        uint64_t need = sched_state_footprint(s, w[i], gpu);
        if (held > 0 && !fits(s, gpu, used + need)) {
            blocked = w[i]; /* first come, first served: nobody overtakes it */
            break;
        }
        /* Its turn ended between two of its GPU phases, and the parked
         * waiter needs its memory: parking switches it out (it holds
         * nothing and its turn is over).  Granted a new turn first, it
         * would keep the waiter out for another whole turn. */
        int64_t due = sched_turns_switch_due(&w[i]->g[gpu], now);
        if (due && parked && !fits(s, gpu, used + need + sched_state_footprint(s, parked, gpu))) {
            wake = min64(wake, due);
            used += need; /* resident until parking takes it */
            continue;
        }
        /* One just brought back, queued by its cell's demand before its
         * acquire, keeps its memory reserved; so does one that waits for
         * another's GPU phase to end (scheduler_phases.c). */
        int64_t phase = sched_phases_wait(s, h, nh, w, nw, w[i], gpu, now);
        if (phase)
            wake = min64(wake, phase);
        else if (sched_state_grantable(s, w[i], gpu))
            adaptive_grant(s, w[i], gpu, 0, now);
        used += need;
        held++;
    }
    if (!blocked && parked && held > 0 &&
        !fits(s, gpu, used + sched_state_footprint(s, parked, gpu)))
        blocked = parked;
    int contended = parked != NULL;
    /* While a switch is wanted, holders give the GPU back soon after they
     * go idle, so that a switch can use their idle gap. */
    s->contended[gpu] = contended || blocked;
    if (s->contended[gpu]) {
        free(*hp);
        h = *hp = sched_state_list(s, gpu, 1, &nh);
        for (int i = 0; i < nh; i++)
            sched_holds_hint(s, h[i], gpu, sched_turns_idle_hint(&h[i]->g[gpu]), now);
    }
    if (!blocked)
        return wake;
    /* Time slicing: holders whose turn is over make room, oldest first,
     * until what is being given back lets the blocked session in. */
    uint64_t need = sched_state_footprint(s, blocked, gpu), freed = 0;
    for (int i = 0; i < nh; i++)
        if (h[i]->g[gpu].revoking)
            freed += sched_state_footprint(s, h[i], gpu);
    for (int i = 0; i < nh; i++) {
        sess_gpu_t *g = &h[i]->g[gpu];
        if (g->revoking)
            continue;
        int64_t end = interactive_end(s, blocked, g, gpu);
        if (!fits(s, gpu, used - freed + need) && now >= end) {
            freed += sched_state_footprint(s, h[i], gpu);
            sched_holds_revoke(s, h[i], gpu, "quantum", now);
            continue;
        }
        if (end > now)
            wake = min64(wake, end);
    }
    return wake;
}

int64_t sched_policy_decide(gs_sched_t *s, int gpu, int64_t now)
{
    int nh, nw;
    sched_session_t **h = sched_state_list(s, gpu, 1, &nh);
    sched_session_t **w = sched_state_list(s, gpu, 0, &nw);
    nw = sched_gang_filter(w, nw, gpu); /* a gang waits for its lower GPUs first */
    int64_t wake;
    if (s->cfg.enabled) {
        /* Holds granted while the scheduler was off have no slice: give
         * them the policy's longest from when they began. */
        int64_t len = s->cfg.policy == GS_POLICY_EXCLUSIVE ? s->cfg.tq_us
                      : s->cfg.policy == GS_POLICY_BURST   ? s->cfg.quota_max_us
                                                           : s->cfg.adaptive_max_us;
        for (int i = 0; i < nh; i++) {
            sess_gpu_t *g = &h[i]->g[gpu];
            if (g->deadline == GS_SCHED_NEVER) {
                g->quantum = len;
                g->deadline = g->hold_start + len;
            }
        }
    }
    if (!s->cfg.enabled)
        wake = decide_off(s, gpu, h, nh, w, nw, now);
    else if (s->cfg.policy == GS_POLICY_EXCLUSIVE)
        wake = decide_exclusive(s, gpu, h, nh, w, nw, now);
    else if (s->cfg.policy == GS_POLICY_BURST)
        wake = decide_burst(s, gpu, h, nh, w, nw, now);
    else
        wake = decide_adaptive(s, gpu, &h, nh, w, nw, now);
    free(h);
    free(w);
    return wake > now ? wake : GS_SCHED_NEVER;
}
