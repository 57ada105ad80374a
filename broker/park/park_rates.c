/*
 * park_rates.c - what a switch costs: how fast parking moves memory out
 * and back, per tier and GPU (every copy moves the estimate halfway,
 * gs_park_policy_rate_update) and per session (its own copies, while it
 * stays on the tier they were made on), what a switch moves (a partial
 * park on the swap tier, both ways at once), and telling the scheduler,
 * whose turns last at least 10 x a session's switch cost and which
 * switches a running cell out only when that pays (scheduler.h,
 * gs_sched_set_move).  The tiers differ twentyfold (the checkpoint
 * API ~2.5 GB/s out, the swap tier ~35 GB/s), so one estimate for both
 * would be wrong for either.
 */
#include <math.h>

#include "park_rates.h"
#include "park_swap.h"

void park_rates_init(gs_park_t *p)
{
    for (int g = 0; g < GS_MAX_GPUS; g++) {
        p->out_bps[TIER_CHECKPOINT][g] = GS_PARK_DEFAULT_PARK_BPS;
        p->in_bps[TIER_CHECKPOINT][g] = GS_PARK_DEFAULT_UNPARK_BPS;
        p->out_bps[TIER_SWAP][g] = GS_PARK_DEFAULT_SWAP_BPS;
        p->in_bps[TIER_SWAP][g] = GS_PARK_DEFAULT_SWAP_BPS;
        p->last_tier[g] = TIER_CHECKPOINT;
    }
}

void park_rates_measured(gs_park_t *p, psess_t *ps, int out, uint64_t bytes, double seconds)
{
    int t = ps->tier == TIER_SWAP ? TIER_SWAP : TIER_CHECKPOINT;
    for (int g = 0; g < p->ngpus; g++)
        if (ps->bytes[g]) {
            gs_park_policy_rate_update(out ? &p->out_bps[t][g] : &p->in_bps[t][g], bytes, seconds);
            p->last_tier[g] = t;
        }
    if (ps->rates_tier != t) { /* its copies on the other tier say nothing of this one */
        ps->out_bps = ps->in_bps = 0;
        ps->rates_tier = t;
    }
    gs_park_policy_rate_update(out ? &ps->out_bps : &ps->in_bps, bytes, seconds);
}

/* The tier a park of the session would use on GPU g now. */
static int tier_now(const gs_park_t *p, const park_view_t *v, int g)
{
    if (p->cfg.swap && park_swap_available(p) && park_swap_suits(p, v->s->id, g))
        return TIER_SWAP;
    return TIER_CHECKPOINT;
}

/* What a switch on the swap tier moves of v's memory on GPU g: a session
 * parked in part brings back what is out; a resident one, beside a session
 * parked there, gives up only the room that one lacks (a partial park,
 * park_victims), in whole segments of its hooks; otherwise all of it. */
static uint64_t switch_bytes(const gs_park_t *p, const park_views_t *vs, const park_view_t *v,
                             int g)
{
    const psess_t *ps = v->ps;
    uint64_t foot = v->foot[g];
    if (ps->st == PS_PARKED)
        return ps->partial && ps->bytes[g] ? ps->bytes[g] : foot;
    if (ps->st != PS_RESIDENT)
        return foot;
    uint64_t in = 0; /* the largest session out on the swap tier here */
    for (int i = 0; i < vs->n; i++) {
        const psess_t *o = vs->v[i].ps;
        if (o != ps && o->st == PS_PARKED && o->tier == TIER_SWAP && o->bytes[g] > in)
            in = o->bytes[g];
    }
    if (!in)
        return foot;
    int64_t lacks = (int64_t)(in + park_state_margin(p, g)) - park_views_free_signed(p, vs, g);
    uint64_t seg = ps->segment ? ps->segment : PARK_OLD_SEGMENT;
    uint64_t moves = lacks > 0 ? (uint64_t)lacks + seg : seg;
    return moves < foot ? moves : foot;
}

/* The segment each session's hooks move memory in (the largest its
 * clients told at join): a partial park moves whole segments, so up to
 * one more than the room needs.  One pass over the clients. */
static void session_segments(gs_park_t *p, const park_views_t *vs)
{
    for (int i = 0; i < vs->n; i++)
        vs->v[i].ps->segment = 0;
    for (pclient_t *c = zhashx_first(p->clients); c; c = zhashx_next(p->clients)) {
        psess_t *ps = c->swap ? park_state_sess(p, c->session, 0) : NULL;
        if (ps && c->segment > ps->segment)
            ps->segment = c->segment;
    }
}

void park_rates_tell(gs_park_t *p, const park_views_t *vs)
{
    session_segments(p, vs);
    for (int i = 0; i < vs->n; i++) {
        const park_view_t *v = &vs->v[i];
        psess_t *ps = v->ps;
        for (int g = 0; g < p->ngpus; g++) {
            gs_sched_move_t m = {0};
            if (!v->reason[0] && (v->foot[g] || ps->bytes[g])) { /* it can move */
                int t = tier_now(p, v, g);
                int own = ps->rates_tier == t;
                m.out_bps = own && ps->out_bps > 0 ? ps->out_bps : p->out_bps[t][g];
                m.in_bps = own && ps->in_bps > 0 ? ps->in_bps : p->in_bps[t][g];
                /* On the swap tier a switch moves only what the room
                 * needs (switch_bytes, at least 1/32 of the footprint),
                 * and the session going out and the one coming in copy at
                 * once: the GPU waits for the longer of the two, about
                 * half the sum.  Elsewhere a switch is a whole park. */
                uint64_t foot = v->foot[g] ? v->foot[g] : ps->bytes[g];
                if (t == TIER_SWAP && foot) {
                    m.bytes = switch_bytes(p, vs, v, g);
                    if (m.bytes < foot / 32)
                        m.bytes = foot / 32;
                    m.overlapped = 1;
                }
            }
            /* Footprints move by a little all the time: tell a change of
             * more than 1 %. */
            const gs_sched_move_t *was = &ps->told[g];
            if ((m.out_bps == 0) == (was->out_bps == 0) && (m.in_bps == 0) == (was->in_bps == 0) &&
                fabs(m.out_bps - was->out_bps) <= 0.01 * was->out_bps &&
                fabs(m.in_bps - was->in_bps) <= 0.01 * was->in_bps &&
                m.overlapped == was->overlapped &&
                fabs((double)m.bytes - (double)was->bytes) <= 0.01 * (double)was->bytes)
                continue;
            if (gs_sched_set_move(p->sched, ps->id, g, &m) == 0)
                ps->told[g] = m;
        }
    }
}
