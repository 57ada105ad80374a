/*
 * park_victims.c - choosing and starting victims for an amount of memory
 * on a GPU (the decision itself is gs_park_policy_choose, park_policy.h),
 * and the reason of a refusal.
 */
#include <string.h>

#include "park_jobs.h"
#include "park_ledger.h"
#include "park_swap.h"
#include "park_victims.h"

/* A session unparked for its cell keeps its slice: it is not switched out
 * again before it had a grant or its shortest slice went by (its first
 * acquire may come late on a loaded machine).  One that went out again
 * without asking is not brought back for its cell alone any more
 * (park_poll.c, cell_guess_missed).  Returns when that protection ends
 * (0: none). */
static int64_t protected_until(const park_view_t *v, int64_t now)
{
    const psess_t *ps = v->ps;
    if (!ps->unparked_at)
        return 0;
    for (int g = 0; g < GS_MAX_GPUS; g++)
        if (v->si[g].grants > ps->grants_at_unpark[g])
            return 0;
    int64_t longest = 0;
    for (int g = 0; g < GS_MAX_GPUS; g++)
        if (v->si[g].min_slice_us > longest)
            longest = v->si[g].min_slice_us;
    return now - ps->unparked_at < longest ? ps->unparked_at + longest : 0;
}

/* What a session parked in part (on the swap tier) still holds on GPU g. */
static uint64_t part_left(const park_view_t *v, int g)
{
    const psess_t *ps = v->ps;
    if (ps->st != PS_PARKED || !ps->partial || ps->tier != TIER_SWAP || ps->stuck ||
        ps->swap_gpu != g || v->foot[g] <= ps->bytes[g])
        return 0;
    return v->foot[g] - ps->bytes[g];
}

/* How much more than they hold now the session's processes on GPU g
 * have held at their peaks. */
static uint64_t peak_excess(const gs_park_t *p, const char *session, int g)
{
    uint64_t sum = 0;
    for (const pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients))
        if (!strcmp(c->session, session) && c->peak[g] > c->used[g])
            sum += c->peak[g] - c->used[g];
    return sum;
}

/* A session waiting for a make_room answer is in the middle of an
 * allocation: not a victim. */
static int asking(const gs_park_t *p, const char *session)
{
    for (const room_t *r = p->rooms; r; r = r->next)
        if (!strcmp(r->session, session))
            return 1;
    return 0;
}

/* Choose and start parking victims on GPU g for `need` bytes; the
 * excluded session is the one the room is for. */
gs_park_pick_rc_t park_victims(gs_park_t *p, park_views_t *vs, int g, uint64_t need,
                               const char *exclude, int allow_switched, int64_t deadline,
                               int64_t now, int64_t *wait_until, const char *why)
{
    /* A partial park leaves room for what the session it makes room for
     * will allocate beyond its footprint (its temporaries): what its
     * processes held at their peaks, and at least 1/32 of the GPU (4.4 GiB
     * on the H200, 2.5 GiB on the H100), so that its next allocations need
     * no second park.  (On the H200 a 56 GiB notebook back from a switch
     * checked its data with 2 GiB it had never held before; the remainder
     * of the one parked in part could not be taken then, and the notebook
     * died of OOM.  It can now: the rest of it goes out into the same
     * lease.) */
    uint64_t slack = exclude ? peak_excess(p, exclude, g) : 0;
    if (slack < p->total[g] / 32)
        slack = p->total[g] / 32;
    gs_park_cand_t *c = calloc((size_t)vs->n + 1, sizeof *c);
    int *map = calloc((size_t)vs->n + 1, sizeof *map),
        *picked = calloc((size_t)vs->n + 1, sizeof *picked);
    int n = 0;
    for (int i = 0; c && map && picked && i < vs->n; i++) {
        park_view_t *v = &vs->v[i];
        /* One parked in part gives its remainder, while it does not ask to
         * come back. */
        uint64_t left_on_gpu = part_left(v, g);
        if (left_on_gpu && !v->reason[0] && !v->ps->job && !v->ps->demand_since && !v->cell_busy &&
            !v->demand && (!exclude || strcmp(v->s->id, exclude) != 0)) {
            c[n] = (gs_park_cand_t){.bytes = left_on_gpu,
                                    .host_bytes = left_on_gpu,
                                    .last_active = v->last_active,
                                    .idle = 1,
                                    .failed = v->ps->failed};
            map[n++] = i;
            continue;
        }
        if (v->reason[0] || v->ps->st != PS_RESIDENT || v->ps->stuck || !v->foot[g] ||
            (exclude && !strcmp(v->s->id, exclude)) || asking(p, v->s->id))
            continue;
        /* A holder is never parked, but one without a running cell is about
         * to give its grant back (cell idle revoked it, or the hook's idle
         * release comes): worth waiting for, within the request's time. */
        int idle = !v->holding && !v->cell_busy && !v->wants && !v->demand;
        int settling = v->holding && !v->cell_busy;
        if (v->holding && !settling)
            continue;
        /* An active session holding nothing is switched out only when the
         * scheduler says that pays (its turn is over, or its idle gap is
         * longer than a switch costs), and not before its first grant
         * after an unpark. */
        int active = !idle && !settling;
        int64_t until = protected_until(v, now), at = 0;
        if (!v->si[g].switchable && v->si[g].switchable_at_us != GS_SCHED_NEVER)
            at = v->si[g].switchable_at_us;
        if (until && (v->si[g].switchable || at) && at < until)
            at = until;
        c[n] = (gs_park_cand_t){.bytes = v->foot[g],
                                .host_bytes = v->host,
                                .last_active = v->last_active,
                                .idle = idle,
                                .settling = settling,
                                .switched_out = active && !until && v->si[g].switchable,
                                .switch_at = active ? at : 0,
                                .cost_us = v->si[g].switch_cost_us,
                                .think_us = v->si[g].think_gap_us,
                                .failed = v->ps->failed,
                                /* The smallest move: the swap tier parks it in part. */
                                .partial = park_swap_can_part(p, v->s->id, g),
                                .part_slack = slack};
        map[n++] = i;
    }
    /* What the host ledger has room for (park_ledger.c), and what a
     * session coming back from the swap tier frees as the one going out
     * fills it (the switch's relay, park_swap.c): a switch needs host room
     * for one notebook, not two. */
    uint64_t budget_left = park_ledger_host_room(p, g) + park_swap_relayable(p, exclude, g);
    gs_park_pick_rc_t rc = GS_PICK_NONE;
    if (c && map && picked)
        rc = gs_park_policy_choose(c, n, need, allow_switched, budget_left, now, p->cfg.idle_us,
                                   deadline, picked, wait_until);
    /* Room is made by the smallest move: a victim the swap tier can park
     * in part moves only what is still needed, plus the slack (a switch
     * needs room for what the session coming back has out, an allocation
     * for itself), not all it holds; the policy took those first.  A
     * session parked in part is a victim again for its remainder (the
     * candidates above). */
    uint64_t left = need;
    for (int k = 0; rc == GS_PICK_OK && k < n; k++) {
        if (!picked[k])
            continue;
        psess_t *victim = vs->v[map[k]].ps;
        memset(victim->part, 0, sizeof victim->part);
        uint64_t part = left + slack;
        if (c[k].partial && left && part < c[k].bytes)
            victim->part[g] = part;
        left = left > c[k].bytes ? left - c[k].bytes : 0;
        /* A running cell switched out says why it paid (event log). */
        char full[400];
        const gs_sched_info_t *si = &vs->v[map[k]].si[g];
        if (c[k].switched_out)
            snprintf(full, sizeof full,
                     "%s; its cell runs: %s (switch %.2f s, turn ends in %.2f s, idle gap %.2f s)",
                     why,
                     !si->switch_cost_us                         ? "no switch cost known yet"
                     : si->turn_end_us && now >= si->turn_end_us ? "its turn is over"
                     : !si->turn_end_us ? "its turn is over (or it had none)"
                                        : "its GPU idles longer than a switch",
                     (double)si->switch_cost_us / 1e6,
                     si->turn_end_us ? (double)(si->turn_end_us - now) / 1e6 : 0.0,
                     (double)si->idle_gap_us / 1e6);
        else
            snprintf(full, sizeof full, "%s", why);
        snprintf(victim->room_for, sizeof victim->room_for, "%s", exclude ? exclude : "");
        if (park_jobs_park(p, victim, full, now) != 0)
            rc = GS_PICK_NONE; /* cannot happen: the reason was checked */
    }
    free(c);
    free(map);
    free(picked);
    return rc;
}

/* The reason of a refusal: where the memory is. */
void park_victims_explain(gs_park_t *p, const park_views_t *vs, int g, uint64_t need,
                          const char *exclude, gs_park_pick_rc_t rc, int64_t now, char *out,
                          size_t len)
{
    char a[32], bb[32], c[32], d[32], e[32], f[32];
    if (rc == GS_PICK_BUDGET) {
        gs_host_ledger_t l = park_ledger(p);
        const char *bound = gs_host_ledger_bound(&l);
        char by[120];
        if (!strcmp(bound, "budget"))
            snprintf(by, sizeof by, "park_host_budget %s", park_state_mib(f, sizeof f, l.budget));
        else if (!strcmp(bound, "reserve"))
            snprintf(by, sizeof by, "the machine's free memory less park_host_reserve %s",
                     park_state_mib(f, sizeof f, l.reserve));
        else
            snprintf(by, sizeof by, "%s of host memory less park_host_reserve %s",
                     park_state_mib(e, sizeof e, l.limit), park_state_mib(f, sizeof f, l.reserve));
        snprintf(out, len,
                 "GPU %d and host memory are full: %s more is needed on the GPU, and host memory "
                 "has room for %s more parked memory (bound by %s; %s parked, %s pinned, %s in "
                 "checkpoint images)",
                 g, park_state_mib(a, sizeof a, need),
                 park_state_mib(bb, sizeof bb, park_ledger_host_room(p, g)), by,
                 park_state_mib(c, sizeof c, park_state_host_used(p)),
                 park_state_mib(d, sizeof d, l.pinned), park_state_mib(e, sizeof e, l.images));
        return;
    }
    uint64_t busy = 0, young = 0, cannot = 0, part = 0;
    for (int i = 0; i < vs->n; i++) {
        const park_view_t *v = &vs->v[i];
        if (v->ps->st == PS_PARKED && v->ps->partial && v->foot[g] > v->ps->bytes[g])
            part += v->foot[g] - v->ps->bytes[g];
        if (v->ps->st == PS_PARKED || (exclude && !strcmp(v->s->id, exclude)))
            continue;
        if (v->reason[0])
            cannot += v->foot[g];
        else if (v->holding || v->cell_busy || v->wants || v->demand)
            busy += v->foot[g];
        else if (now - v->last_active < p->cfg.idle_us)
            young += v->foot[g];
    }
    int n = snprintf(out, len,
                     "not enough memory can be parked (%s more needed): %s in busy sessions "
                     "(running cells or grants), %s idle for less than park_idle_s, %s in "
                     "sessions that cannot be parked",
                     park_state_mib(a, sizeof a, need), park_state_mib(bb, sizeof bb, busy),
                     park_state_mib(c, sizeof c, young), park_state_mib(d, sizeof d, cannot));
    uint64_t held = park_swap_held_used(p, g);
    if (held && n > 0 && (size_t)n < len)
        n += snprintf(out + n, len - (size_t)n,
                      ", %s held by processes dropped while they run (until they join again or "
                      "exit)",
                      park_state_mib(a, sizeof a, held));
    if (part && n > 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n,
                 ", %s left on the GPU by sessions parked in part (a switch moved only what "
                 "the room needed)",
                 park_state_mib(a, sizeof a, part));
}
