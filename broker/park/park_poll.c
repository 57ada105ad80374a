/*
 * park_poll.c - what to park or unpark now (see park.h), looked at again
 * after every event (level-triggered: the state says what to do, so a lost
 * edge cannot strand a session).
 *
 * Per GPU, the needs are served first come, first served: make_room
 * requests (an allocation failed) and parked sessions that need the GPU
 * back (their cell started, a process asked, or a failed unpark is due
 * again).  The head need is served when the estimated free memory allows:
 * a request is answered ok, a parked session is unparked; otherwise
 * victims are chosen (park_policy.h) and parked, and the need waits for
 * them.  Room for make_room comes only from idle sessions; room for an
 * unpark also from active sessions that hold nothing (time slicing: the
 * scheduler queues the parked session and cuts the holders' slices).
 */
#include <string.h>

#include "log.h"
#include "park.h"
#include "park_disk.h"
#include "park_jobs.h"
#include "park_ledger.h"
#include "park_move.h"
#include "park_rates.h"
#include "park_room.h"
#include "park_swap.h"
#include "park_victims.h"

#define SEC 1000000LL

typedef struct {
    int64_t since;
    int late; /* unparked only when it fits without parking anyone */
    room_t *room;
    park_view_t *v;
} need_t;

/* The room a session needs besides its memory to come back: the driver's
 * rounding, and after an unpark that ran out of GPU memory the estimate's
 * error (memory the hooks do not report, such as CUDA contexts: on the
 * H100 a 20 GiB swap in failed seven times where the estimate saw room). */
static uint64_t back_margin(const gs_park_t *p, const psess_t *ps, int g)
{
    return park_state_margin(p, g) + ps->oom_extra;
}

static int fits_back(const gs_park_t *p, const park_views_t *vs, const psess_t *ps)
{
    for (int g = 0; g < p->ngpus; g++)
        if (ps->bytes[g] && park_views_free(p, vs, g) < ps->bytes[g] + back_margin(p, ps, g))
            return 0;
    return 1;
}

/* Tell the scheduler which parked sessions wait for the GPU (their cell
 * cannot ask), and take the demand back from those that got it. */
static void update_demand(gs_park_t *p, park_views_t *vs, int64_t now)
{
    for (int i = 0; i < vs->n; i++) {
        park_view_t *v = &vs->v[i];
        psess_t *ps = v->ps;
        int parked = ps->st == PS_PARKED || ps->st == PS_UNPARKING;
        /* The scheduler queues a parked session for its cell; one left
         * stuck by a failure is brought back too, but holds nobody up. */
        int want = parked && ((v->registered && v->cell_busy) || v->wants);
        /* Brought back for its cell once and gone out again without
         * asking (a job done with the GPU while its cell goes on, or in a
         * long CPU phase): it comes back when it asks.  On the simulated
         * GPU such a job took every other turn from one that asked.  (A
         * checkpointed process cannot ask: its cell is the only sign.) */
        if (ps->cell_guess_missed && ps->tier == TIER_SWAP && !v->wants)
            want = 0;
        if (!v->cell_busy)
            ps->cell_guess_missed = 0; /* the next cell is a new guess */
        /* A checkpointed process cannot ask, and without its watcher no
         * cell says it needs the GPU: it may be in one (frozen). */
        if (parked && ps->tier == TIER_CHECKPOINT && v->s->registrar_gone)
            want = 1;
        if (parked && ps->stuck && !want && !ps->demand_since)
            ps->demand_since = now;
        if (want && !ps->demand_since) {
            ps->demand_since = now;
            ps->noted = 0;
        } else if (!want && !ps->stuck && ps->st == PS_PARKED) {
            ps->demand_since = 0;
        }
        /* Queued only while it can come back: not while the budget stops it
         * or a failed unpark waits for its retry. */
        int queue = want && !ps->no_demand && ps->retry_at <= now;
        for (int g = 0; g < p->ngpus; g++) {
            if (parked && !queue && v->si[g].demand && !v->si[g].wants) {
                gs_sched_demand(p->sched, ps->id, g, 0, now);
                p->changed = 1;
            } else if (parked && queue && ps->bytes[g] && !v->si[g].demand && !v->si[g].wants &&
                       v->si[g].state != GS_SESS_RUNNING) {
                gs_sched_demand(p->sched, ps->id, g, 1, now);
                p->changed = 1;
            } else if (ps->st == PS_RESIDENT && v->si[g].demand && !v->si[g].wants &&
                       now >= ps->demand_expire) {
                gs_sched_demand(p->sched, ps->id, g, 0, now); /* no acquire came */
                p->changed = 1;
            }
        }
        if (ps->st == PS_RESIDENT && ps->demand_expire > now && ps->demand_expire < p->wake)
            p->wake = ps->demand_expire;
    }
}

/* Sessions parked on the swap tier for park_deep_idle_s go to the deep
 * tier (park_policy.h): back first, while the GPU has room for them and
 * nobody asks for it, then checkpointed, which frees their context and the
 * pool's pinned memory. */
static void demote(gs_park_t *p, park_views_t *vs, int64_t now)
{
    if (p->cfg.deep_idle_us <= 0)
        return;
    for (int i = 0; i < vs->n; i++) {
        park_view_t *v = &vs->v[i];
        psess_t *ps = v->ps;
        int checkpoint_ok = v->registered || p->cfg.plain;
        if (ps->st != PS_PARKED || ps->tier != TIER_SWAP || ps->stuck || ps->demand_since ||
            ps->disk != DISK_NONE || /* on the disk tier: it holds no pinned memory */
            ps->retry_at > now || !checkpoint_ok)
            continue;
        int g = -1, gpus = 0;
        for (int k = 0; k < p->ngpus; k++)
            if (ps->bytes[k]) {
                g = k;
                gpus++;
            }
        if (gpus != 1)
            continue;
        int64_t due = ps->parked_at + p->cfg.deep_idle_us;
        if (gs_park_policy_demote(&p->cfg, now - ps->parked_at, ps->bytes[g],
                                  park_views_free(p, vs, g), park_state_margin(p, g),
                                  v->wants || v->cell_busy, checkpoint_ok)) {
            ps->demoting = 1;
            park_jobs_unpark(p, ps, "to the deep tier: back first, then checkpointed", now);
        } else if (due > now && due < p->wake)
            p->wake = due;
    }
}

/* 1: go on with the next need; 0: it waits. */
static int serve_unpark(gs_park_t *p, park_views_t *vs, park_view_t *v, int g, int late,
                        int64_t now)
{
    psess_t *ps = v->ps;
    if (ps->st != PS_PARKED)
        return 1; /* coming back already: its memory is counted */
    if (ps->retry_at > now) {
        if (ps->retry_at < p->wake)
            p->wake = ps->retry_at;
        return 1; /* a failed unpark waits for its retry without holding others up */
    }
    if (fits_back(p, vs, ps)) {
        park_jobs_unpark(p, ps,
                         ps->stuck                       ? "bring it back after a failure"
                         : v->registered && v->cell_busy ? "its cell started"
                         : v->wants                      ? "it asked for the GPU"
                                                         : "its memory fits again",
                         now);
        return 1;
    }
    /* Crowded here, room on another GPU of the model: restored there
     * (park_move.c), instead of parking others to make room here. */
    int to = park_move_target(p, vs, v, g);
    if (to >= 0) {
        char why[200];
        snprintf(why, sizeof why, "%s; GPU %d has no room for it, GPU %d has: restored there",
                 v->registered && v->cell_busy ? "its cell started" : "it asked for the GPU", g,
                 to);
        ps->move_from = g;
        ps->move_to = to;
        park_jobs_unpark(p, ps, why, now);
        return 1;
    }
    /* A switch on the swap tier runs both ways at once: the session coming
     * back takes the GPU's memory batch by batch as the one going out
     * frees it (its hook waits for memory), so the link carries both
     * directions together instead of one after the other. */
    /* (Also after a failed swap in: its memory is still in its lease, and
     * the session going out for it waits for its chunks: without it coming
     * back at the same time, that park failed for want of them, again and
     * again, on the simulated GPU's pressure bench.) */
    if (ps->tier == TIER_SWAP) {
        /* Unclamped: what is leaving may be promised already to another
         * session coming in this way (free is then below zero). */
        int64_t leaving = (int64_t)park_swap_leaving(p, g);
        if (leaving && park_views_free_signed(p, vs, g) + leaving >=
                           (int64_t)(ps->bytes[g] + back_margin(p, ps, g))) {
            park_jobs_unpark(p, ps, "its cell started (while another session goes out)", now);
            return 1;
        }
    }
    if (late || park_views_in_flight(vs, g))
        return late;
    /* Cells that start together: the one on a resident session may be
     * announced a moment after this one (each notebook's launcher reports
     * its own).  Taken at once, that session would be switched out as its
     * cell begins and brought back after this one: on the H200 both 32 GiB
     * adaptive pairs began with such a switch, 0.8 s each way for nothing.
     * A short wait lets its cell event arrive; it then keeps its memory
     * for its switch cost (sched_turns_switchable). */
    if (ps->demand_since && now < ps->demand_since + PARK_START_GRACE_US) {
        if (ps->demand_since + PARK_START_GRACE_US < p->wake)
            p->wake = ps->demand_since + PARK_START_GRACE_US;
        return 0;
    }
    char why[200];
    snprintf(why, sizeof why, "make room to unpark session %.64s", ps->id);
    int64_t wait_until = 0;
    uint64_t free_now = park_views_free(p, vs, g);
    uint64_t want = ps->bytes[g] + back_margin(p, ps, g);
    uint64_t need = want > free_now ? want - free_now : 0;
    gs_park_pick_rc_t rc =
        park_victims(p, vs, g, need, ps->id, 1, INT64_MAX, now, &wait_until, why);
    if (rc == GS_PICK_WAIT && wait_until < p->wake)
        p->wake = wait_until;
    if (rc == GS_PICK_BUDGET)
        ps->no_demand = 1;
    if ((rc == GS_PICK_NONE || rc == GS_PICK_BUDGET) && !ps->noted) {
        char reason[400];
        park_victims_explain(p, vs, g, need, ps->id, rc, now, reason, sizeof reason);
        gs_info("session %s waits to be unparked on GPU %d: %s", ps->id, g, reason);
        ps->noted = 1;
    }
    return 0;
}

static int cmp_need(const void *a, const void *b)
{
    const need_t *x = a, *y = b;
    if (x->late != y->late)
        return x->late - y->late;
    return x->since < y->since ? -1 : x->since > y->since;
}

static void serve_gpu(gs_park_t *p, park_views_t *vs, int g, int64_t now)
{
    int cap = vs->n + 1, n = 0;
    for (room_t *r = p->rooms; r; r = r->next)
        cap++;
    need_t *needs = calloc((size_t)cap, sizeof *needs);
    if (!needs)
        return;
    for (room_t *r = p->rooms; r; r = r->next)
        if (r->gpu == g)
            needs[n++] = (need_t){r->since, 0, r, NULL};
    for (int i = 0; i < vs->n; i++) {
        park_view_t *v = &vs->v[i];
        if (v->ps->st != PS_PARKED || !v->ps->bytes[g])
            continue;
        if (v->ps->demand_since)
            needs[n++] = (need_t){v->ps->demand_since, 0, NULL, v};
        else if (v->reason[0] || (!v->registered && p->cfg.plain))
            needs[n++] = (need_t){v->ps->since, 1, NULL, v}; /* parking off now, or plain */
    }
    qsort(needs, (size_t)n, sizeof *needs, cmp_need);
    for (int k = 0; k < n; k++) {
        int go_on = needs[k].room ? park_room_serve(p, vs, needs[k].room, now)
                                  : serve_unpark(p, vs, needs[k].v, g, needs[k].late, now);
        if (!go_on)
            break;
    }
    free(needs);
}

/* Sessions whose notebook asked to be parked (`park`), once idle: no
 * running cell, no grant, nothing asked for.  A session that cannot be
 * parked any more, or holds nothing, is not waited for. */
static void asked_parks(gs_park_t *p, park_views_t *vs, int64_t now)
{
    for (int i = 0; i < vs->n; i++) {
        park_view_t *v = &vs->v[i];
        psess_t *ps = v->ps;
        if (!ps->asked)
            continue;
        uint64_t any = 0;
        for (int g = 0; g < p->ngpus; g++)
            any |= v->foot[g];
        if (ps->st != PS_RESIDENT || v->reason[0] || ps->stuck || !any) {
            ps->asked = 0;
            continue;
        }
        if (v->cell_busy || v->holding || v->wants || v->demand)
            continue; /* after its cell */
        ps->asked = 0;
        park_jobs_park(p, ps, "its notebook asked (%gpushare release)", now);
    }
}

static void poll_once(gs_park_t *p, int64_t now)
{
    p->wake = INT64_MAX;
    park_views_t vs = park_views(p, now);
    if (!vs.v)
        return;
    park_views_prune(p, &vs);
    park_rates_tell(p, &vs); /* before any decision: turns and switches are priced with them */
    park_room_expire(p, &vs, now);
    /* Victims whose grant was revoked start once they have let go. */
    for (int i = 0; i < vs.n; i++) {
        psess_t *ps = vs.v[i].ps;
        if (ps->st == PS_REVOKING && !gs_sched_session_holding(p->sched, ps->id))
            park_jobs_submit(p, ps, now);
    }
    /* A parked session's memory, as its hooks report it (an adopted one
     * is only known so). */
    for (int i = 0; i < vs.n; i++)
        for (int g = 0; g < p->ngpus && vs.v[i].ps->st == PS_PARKED && !vs.v[i].ps->partial; g++)
            if (vs.v[i].foot[g] > vs.v[i].ps->bytes[g])
                vs.v[i].ps->bytes[g] = vs.v[i].foot[g];
    update_demand(p, &vs, now);
    asked_parks(p, &vs, now);
    demote(p, &vs, now);
    /* Stuck with no memory known: nothing to make room for. */
    for (int i = 0; i < vs.n; i++) {
        psess_t *ps = vs.v[i].ps;
        uint64_t any = 0;
        for (int g = 0; g < p->ngpus; g++)
            any |= ps->bytes[g];
        if (ps->st == PS_PARKED && ps->stuck && !any && ps->retry_at <= now)
            park_jobs_unpark(p, ps, "bring it back after a failure", now);
    }
    for (int g = 0; g < p->ngpus; g++)
        serve_gpu(p, &vs, g, now);
    free(vs.v);
}

/* Anything to look at?  Most events (acquire, release) come while nothing
 * is parked or asked for: then the poll costs one pass over a small table. */
static int anything(gs_park_t *p, int64_t now)
{
    if (p->rooms || p->nresv)
        return 1;
    for (const psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess))
        if (ps->st != PS_RESIDENT || ps->stuck || ps->asked || ps->demand_expire > now - SEC)
            return 1; /* (a demand is taken back 2 s after an unpark) */
    return 0;
}

#define TARGETS_EVERY (20 * 1000) /* us */

int gs_park_poll(gs_park_t *p, int64_t now)
{
    if (!p || !p->api)
        return 0;
    park_swap_check_held(p, now);
    int64_t mem_was = p->mem_at;
    park_ledger_refresh(p, now);
    if (p->mem_at != mem_was) /* the machine's memory changed: the budget may allow more */
        for (psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess))
            ps->no_demand = 0;
    if (p->pools) { /* the pools follow what may be parked soon, parked or not */
        /* At most every TARGETS_EVERY: the walk over every client cost 11 %
         * of the broker's CPU under the load test's storms (doc/load-test.md),
         * and pinning, which the targets steer, takes 0.2-0.4 s a GiB. */
        if (now >= p->targets_at) {
            park_swap_targets(p);
            p->targets_at = now + TARGETS_EVERY;
            p->targets_stale = 0;
        } else {
            p->targets_stale = 1; /* gs_park_next_deadline brings the loop back */
        }
        gs_swap_pools_poll(p->pools, now);
        park_swap_check(p, now);
        park_disk_collect(p, now);
        park_jobs_finish_swaps(p, now);
    }
    if (!anything(p, now)) {
        p->wake = INT64_MAX;
        return 0;
    }
    p->changed = 0;
    poll_once(p, now);
    if (p->pools) { /* (after poll_once, which sets the next wake from scratch) */
        park_disk_poll(p, now);
        park_jobs_finish_swaps(p, now);
    }
    return p->changed;
}

int64_t gs_park_next_deadline(const gs_park_t *p)
{
    if (!p || !p->api)
        return INT64_MAX;
    int64_t due = p->wake;
    if (p->pools) {
        int64_t pools = gs_swap_pools_next_deadline(p->pools);
        if (pools < due)
            due = pools;
        int64_t sock = gs_pool_socket_next_deadline(p->pool_sock);
        if (sock != INT64_MAX && sock * 1000 < due)
            due = sock * 1000; /* its clock is the broker's, in ms */
    }
    if (p->held && p->held_check_at < due)
        due = p->held_check_at; /* held memory: are its processes still there? */
    if (p->pools && p->targets_stale && p->targets_at < due)
        due = p->targets_at;
    /* The machine's memory is read again once a second while anything is
     * parked or asked for (what waits on the ledger may fit then). */
    if ((p->rooms || park_state_host_used(p)) && park_ledger_next(p) < due)
        due = park_ledger_next(p);
    return due;
}
