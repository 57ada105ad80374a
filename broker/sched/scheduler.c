/*
 * scheduler.c - the scheduler's public API (scheduler.h), on top of the
 * library: life, events, timers and queries.  Each event updates the
 * tables (scheduler_state.c) and holds (scheduler_holds.c), then every GPU
 * is decided again (scheduler_policy.c): the tables are small, and one code
 * path for every event keeps the policies simple to reason about.  The
 * settings are in scheduler_config.c, gangs in scheduler_gang.c.  Calls
 * point down only: nothing below calls back into this file.
 */
#include "scheduler.h"

#include "scheduler_holds.h"
#include "scheduler_policy.h"
#include "scheduler_state.h"
#include "scheduler_turns.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- life ----------------------------------------------------------------- */

gs_sched_t *gs_sched_new(int ngpus, const uint64_t *memory_total)
{
    gs_sched_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (ngpus < 0)
        ngpus = 0;
    s->ngpus = ngpus > GS_SCHED_MAX_GPUS ? GS_SCHED_MAX_GPUS : ngpus;
    for (int i = 0; i < s->ngpus; i++) {
        s->mem_total[i] = memory_total ? memory_total[i] : 0;
        s->wake[i] = GS_SCHED_NEVER;
    }
    gs_sched_config_default(&s->cfg);
    return s;
}

void gs_sched_destroy(gs_sched_t **self_p)
{
    gs_sched_t *s = *self_p;
    if (!s)
        return;
    sched_state_free(s);
    free(s);
    *self_p = NULL;
}

/* ---- actions -------------------------------------------------------------- */

int gs_sched_pop_action(gs_sched_t *s, gs_sched_action_t *out)
{
    if (s->headacts >= s->nacts)
        return 0;
    *out = s->acts[s->headacts++];
    return 1;
}

/* ---- deciding -------------------------------------------------------------- */

static void decide_all(gs_sched_t *s, int64_t now)
{
    s->last_now = now;
    s->dirty = 0;
    for (int i = 0; i < s->ngpus; i++)
        s->wake[i] = sched_policy_decide(s, i, now);
}

void gs_sched_tick(gs_sched_t *s, int64_t now)
{
    decide_all(s, now);
}

int64_t gs_sched_next_deadline(const gs_sched_t *s)
{
    if (s->dirty)
        return s->last_now;
    int64_t t = GS_SCHED_NEVER;
    for (int i = 0; i < s->ngpus; i++)
        if (s->wake[i] < t)
            t = s->wake[i];
    return t;
}

/* ---- events ---------------------------------------------------------------- */

void gs_sched_register(gs_sched_t *s, const char *session, int64_t now)
{
    sched_session_t *ss = sched_state_session_get(s, session);
    ss->registered = 1;
    if (!ss->last_active)
        ss->last_active = now;
    decide_all(s, now);
}

int gs_sched_unregister(gs_sched_t *s, const char *session, int64_t now)
{
    sched_session_t *ss = sched_state_session_find(s, session);
    if (!ss || !ss->registered)
        return -1;
    ss->registered = 0;
    ss->cell_busy = 0;
    for (int i = 0; i < s->ngpus; i++) {
        ss->g[i].boost_left = 0;
        sched_state_boost_end(&ss->g[i], now);
        if (s->cfg.enabled)
            sched_holds_revoke(s, ss, i, "cell_idle", now);
    }
    if (ss->nclients == 0)
        sched_state_session_remove(s, ss);
    decide_all(s, now);
    return 0;
}

int gs_sched_cell(gs_sched_t *s, const char *session, int busy, int64_t now)
{
    sched_session_t *ss = sched_state_session_find(s, session);
    if (!ss)
        return -1;
    ss->last_active = now;
    if (busy != ss->cell_busy)
        sched_turns_think_mark(ss, busy, now);
    if (busy && !ss->cell_busy) {
        ss->cell_busy = 1;
        ss->cell_start = now;
        for (int i = 0; i < s->ngpus; i++) {
            sess_gpu_t *g = &ss->g[i];
            g->boost_left = s->cfg.boost_us;
            g->gaps_stale = 1; /* (sched_turns_gap_close) */
            g->gpu_mark = g->gpu_time + (g->holding ? now - g->hold_start : 0);
        }
    } else if (!busy) {
        ss->cell_busy = 0;
        for (int i = 0; i < s->ngpus; i++) {
            sched_state_boost_end(&ss->g[i], now);
            ss->g[i].boost_left = 0;
            sched_turns_over(&ss->g[i]); /* the next cell starts afresh */
            ss->g[i].released_at = 0;    /* (between cells the user thinks: no gap) */
            if (s->cfg.enabled)
                sched_holds_revoke(s, ss, i, "cell_idle", now);
            sched_holds_drop_demand(s, ss, i, now); /* the cell that waited is over */
        }
    }
    decide_all(s, now);
    return 0;
}

/* Forget everything the client holds or asks for; it stays in the table. */
static void client_detach(gs_sched_t *s, sched_client_t *c, int64_t now)
{
    sched_session_t *ss = c->session;
    for (int i = 0; i < s->ngpus; i++) {
        client_gpu_t *cg = &c->g[i];
        sched_state_set_wants(c, i, 0);
        sched_state_set_used(c, i, 0);
        if (cg->grant_id)
            sched_holds_client_release(s, c, i, now);
        if (ss->g[i].waiting && !ss->g[i].demand && !sched_state_wants(s, ss, i)) {
            sched_holds_dequeue(&ss->g[i], now);
            ss->g[i].active_since = 0;
        }
    }
    c->session = NULL;
    ss->nclients--;
}

int gs_sched_join(gs_sched_t *s, const char *client, const char *session, int64_t now)
{
    sched_client_t *c = sched_state_client_find(s, client);
    if (c && strcmp(c->session->id, session) == 0)
        return 0;
    if (c) {
        sched_session_t *old = c->session;
        client_detach(s, c, now);
        if (!old->registered && old->nclients == 0)
            sched_state_session_remove(s, old);
    } else {
        c = sched_state_client_add(s, client);
    }
    c->session = sched_state_session_get(s, session);
    c->session->nclients++;
    if (!c->session->last_active)
        c->session->last_active = now;
    decide_all(s, now);
    return 0;
}

int gs_sched_client_gone(gs_sched_t *s, const char *client, int64_t now)
{
    sched_client_t *c = sched_state_client_find(s, client);
    if (!c)
        return -1;
    sched_session_t *ss = c->session;
    client_detach(s, c, now);
    sched_state_client_remove(s, c);
    int removed = 0;
    if (!ss->registered && ss->nclients == 0) {
        sched_state_session_remove(s, ss);
        removed = 1;
    }
    decide_all(s, now);
    return removed;
}

int gs_sched_acquire(gs_sched_t *s, const char *client, int gpu, int64_t p90, int64_t last,
                     int64_t now)
{
    sched_client_t *c = sched_state_client_find(s, client);
    if (!c || gpu < 0 || gpu >= s->ngpus)
        return -1;
    sess_gpu_t *g = &c->session->g[gpu];
    client_gpu_t *cg = &c->g[gpu];
    g->used = 1;
    c->session->last_active = now;
    if (p90 >= 0 || last >= 0) {
        g->p90 = p90;
        g->last = last;
        g->stats_new = 1;
    }
    if (cg->grant_id && !cg->revoked) {
        sched_holds_grant_client(s, c, gpu, now); /* asked again while holding: same grant */
        return 0;
    }
    sched_state_set_wants(c, gpu, 1);
    sched_turns_gap_close(c->session, g, now);
    if (g->holding && !g->revoking && !cg->grant_id && c->session->residency == GS_SCHED_RESIDENT)
        sched_holds_grant_client(s, c, gpu, now); /* its session holds the GPU */
    else
        sched_holds_enqueue(s, c->session, gpu, now); /* no-op while its session still holds */
    decide_all(s, now);
    return 0;
}

int gs_sched_release(gs_sched_t *s, const char *client, int gpu, uint64_t grant_id, int64_t now)
{
    sched_client_t *c = sched_state_client_find(s, client);
    if (!c || gpu < 0 || gpu >= s->ngpus)
        return -1;
    if (!grant_id || c->g[gpu].grant_id != grant_id)
        return 1;
    c->session->last_active = now;
    sched_holds_client_release(s, c, gpu, now);
    decide_all(s, now);
    return 0;
}

int gs_sched_memory(gs_sched_t *s, const char *client, int gpu, uint64_t used_bytes, int64_t now)
{
    sched_client_t *c = sched_state_client_find(s, client);
    if (!c || gpu < 0 || gpu >= s->ngpus)
        return -1;
    sched_state_set_used(c, gpu, used_bytes);
    if (used_bytes)
        c->session->g[gpu].used = 1;
    decide_all(s, now);
    return 0;
}

/* ---- parking ---------------------------------------------------------------- */

int gs_sched_set_residency(gs_sched_t *s, const char *session, gs_sched_residency_t r, int64_t now)
{
    sched_session_t *ss = sched_state_session_find(s, session);
    if (!ss)
        return -1;
    if (r != GS_SCHED_RESIDENT && ss->residency == GS_SCHED_RESIDENT)
        for (int i = 0; i < s->ngpus; i++) {
            sched_state_boost_end(&ss->g[i], now);
            sched_holds_revoke(s, ss, i, "park", now); /* even with the scheduler off */
            sched_turns_over(&ss->g[i]);               /* switched out */
            if (ss->g[i].released_at)
                ss->g[i].gap_switched = 1; /* (sched_turns_gap_close) */
        }
    ss->residency = r;
    decide_all(s, now);
    return 0;
}

int gs_sched_demand(gs_sched_t *s, const char *session, int gpu, int on, int64_t now)
{
    sched_session_t *ss = sched_state_session_find(s, session);
    if (!ss || gpu < 0 || gpu >= s->ngpus)
        return -1;
    sess_gpu_t *g = &ss->g[gpu];
    if (on && !g->demand) {
        g->demand = 1;
        sched_holds_enqueue(s, ss, gpu, now); /* no-op while it holds or waits already */
    } else if (!on) {
        sched_holds_drop_demand(s, ss, gpu, now);
    }
    decide_all(s, now);
    return 0;
}

int gs_sched_set_move(gs_sched_t *s, const char *session, int gpu, const gs_sched_move_t *m)
{
    sched_session_t *ss = sched_state_session_find(s, session);
    if (!ss || !m || gpu < 0 || gpu >= s->ngpus)
        return -1;
    gs_sched_move_t *g = &ss->g[gpu].move;
    *g = *m;
    g->out_bps = m->out_bps > 0 ? m->out_bps : 0;
    g->in_bps = m->in_bps > 0 ? m->in_bps : 0;
    g->overlapped = m->overlapped != 0;
    return 0;
}

int gs_sched_set_move_rates(gs_sched_t *s, const char *session, int gpu, double out_bps,
                            double in_bps)
{
    gs_sched_move_t m = {out_bps, in_bps, 0, 0};
    return gs_sched_set_move(s, session, gpu, &m);
}

int gs_sched_set_gang(gs_sched_t *s, const char *session, const int *gpus, int n)
{
    sched_session_t *ss = sched_state_session_find(s, session);
    if (!ss)
        return -1;
    unsigned mask = 0;
    for (int i = 0; i < n; i++)
        if (gpus[i] >= 0 && gpus[i] < s->ngpus)
            mask |= 1u << gpus[i];
    ss->gang = __builtin_popcount(mask) >= 2 ? mask : 0;
    s->dirty = 1;
    return 0;
}

unsigned gs_sched_gang(const gs_sched_t *s, const char *session)
{
    const sched_session_t *ss = sched_state_session_find(s, session);
    return ss ? ss->gang : 0;
}

int gs_sched_session_holding(const gs_sched_t *s, const char *session)
{
    const sched_session_t *ss = sched_state_session_find(s, session);
    for (int i = 0; ss && i < s->ngpus; i++)
        if (ss->g[i].holding)
            return 1;
    return 0;
}

/* ---- queries --------------------------------------------------------------- */

int gs_sched_has_session(const gs_sched_t *s, const char *session)
{
    return sched_state_session_find(s, session) != NULL;
}

int gs_sched_session_registered(const gs_sched_t *s, const char *session)
{
    const sched_session_t *ss = sched_state_session_find(s, session);
    return ss && ss->registered;
}

int gs_sched_client_grants(const gs_sched_t *s, const char *client)
{
    const sched_client_t *c = sched_state_client_find(s, client);
    if (!c)
        return -1;
    int n = 0;
    for (int i = 0; i < s->ngpus; i++)
        n += c->g[i].grant_id != 0;
    return n;
}

int gs_sched_session_used_gpu(const gs_sched_t *s, const char *session, int gpu)
{
    const sched_session_t *ss = sched_state_session_find(s, session);
    return ss && gpu >= 0 && gpu < s->ngpus && ss->g[gpu].used;
}

int gs_sched_info(const gs_sched_t *s, const char *session, int gpu, int64_t now,
                  gs_sched_info_t *out)
{
    const sched_session_t *ss = sched_state_session_find(s, session);
    memset(out, 0, sizeof *out);
    if (!ss || gpu < 0 || gpu >= s->ngpus)
        return -1;
    const sess_gpu_t *g = &ss->g[gpu];
    out->state = g->holding ? GS_SESS_RUNNING : g->waiting ? GS_SESS_WAITING : GS_SESS_IDLE;
    out->gpu_time_us = g->gpu_time + (g->holding ? now - g->hold_start : 0);
    out->wait_time_us = g->wait_time + (g->waiting ? now - g->wait_start : 0);
    out->grants = g->grants;
    out->revokes = g->revokes;
    out->resident_bytes = sched_state_footprint(s, ss, gpu);
    out->quantum_us = g->holding ? g->quantum : 0;
    out->boosted = g->boosting;
    out->boost_left_us = sched_state_boost_left(g, now);
    sched_state_shares(s, ss->id, &out->request, &out->limit);
    out->share_used =
        s->cfg.window_us > 0
            ? (double)sched_state_window_used(g, now, s->cfg.window_us) / (double)s->cfg.window_us
            : 0.0;
    out->tau_us = g->tau;
    out->registered = ss->registered;
    out->cell_busy = ss->cell_busy;
    out->cell_start_us = ss->cell_start;
    out->last_active_us = ss->last_active;
    out->wants = sched_state_wants(s, ss, gpu);
    out->demand = g->demand;
    out->residency = ss->residency;
    out->switch_cost_us = sched_turns_switch_cost(g);
    out->min_slice_us = SCHED_SLICE_FACTOR * out->switch_cost_us;
    out->turn_end_us = sched_turns_end(g);
    out->idle_gap_us = sched_turns_idle_gap(g);
    out->think_gap_us = sched_turns_think_gap(ss);
    out->switchable = sched_turns_switchable(ss, g, now, &out->switchable_at_us);
    return 0;
}

static json_t *ids_json(const gs_sched_t *s, int gpu, int holders)
{
    json_t *arr = json_array();
    if (gpu < 0 || gpu >= s->ngpus)
        return arr;
    int n;
    sched_session_t **list = sched_state_list(s, gpu, holders, &n);
    for (int i = 0; i < n; i++)
        json_array_append_new(arr, json_string(list[i]->id));
    free(list);
    return arr;
}

int gs_sched_wait_info(const gs_sched_t *s, const char *client, int gpu, int64_t now,
                       gs_sched_wait_t *out)
{
    memset(out, 0, sizeof *out);
    sched_client_t *c = sched_state_client_find(s, client);
    if (!c || gpu < 0 || gpu >= s->ngpus || c->g[gpu].grant_id || !c->g[gpu].wants)
        return 0;
    int n;
    sched_session_t **list = sched_state_list(s, gpu, 1, &n);
    out->nholders = n;
    for (int i = 0; i < n; i++) {
        const sess_gpu_t *g = &list[i]->g[gpu];
        if (i == 0)
            snprintf(out->holder, sizeof out->holder, "%s", list[i]->id);
        int64_t left = g->deadline == GS_SCHED_NEVER ? GS_SCHED_NEVER
                       : g->deadline > now           ? g->deadline - now
                                                     : 0;
        if (left > out->left_us)
            out->left_us = left;
    }
    free(list);
    return 1;
}

json_t *gs_sched_holders_json(const gs_sched_t *s, int gpu)
{
    return ids_json(s, gpu, 1);
}

json_t *gs_sched_waiting_json(const gs_sched_t *s, int gpu)
{
    return ids_json(s, gpu, 0);
}
