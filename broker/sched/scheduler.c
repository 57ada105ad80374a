/*
 * scheduler.c - the scheduler's tables and events (see scheduler.h): who
 * holds what, the hold/release bookkeeping shared by every policy, and the
 * accounting status reports.  The decisions themselves are in
 * scheduler_policy.c, the settings in scheduler_config.c.
 *
 * A session's hold on a GPU begins with sched_session_grant and ends when
 * its last client grant there is released (or its client dies); a revoke
 * only asks for that.  After every event all GPUs are decided again: the
 * tables are small, and one code path for every event keeps the policies
 * simple to reason about.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* qsort_r */
#endif
#include "scheduler_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HIST 1024 /* past holds kept per session and GPU */

static void *grow(void *p, int *cap, int need, size_t size)
{
    if (need <= *cap)
        return p;
    int n = *cap ? *cap * 2 : 8;
    while (n < need)
        n *= 2;
    void *q = realloc(p, (size_t)n * size);
    if (!q)
        abort(); /* the broker cannot schedule without memory */
    *cap = n;
    return q;
}

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

static void session_free(sched_session_t *ss)
{
    for (int i = 0; i < GS_SCHED_MAX_GPUS; i++)
        free(ss->g[i].hist);
    free(ss);
}

void gs_sched_destroy(gs_sched_t **self_p)
{
    gs_sched_t *s = *self_p;
    if (!s)
        return;
    for (int i = 0; i < s->nsessions; i++)
        session_free(s->sessions[i]);
    for (int i = 0; i < s->nclients; i++)
        free(s->clients[i]);
    free(s->sessions);
    free(s->clients);
    free(s->shares);
    free(s->acts);
    free(s);
    *self_p = NULL;
}

/* ---- tables --------------------------------------------------------------- */

sched_session_t *sched_session_find(const gs_sched_t *s, const char *id)
{
    for (int i = 0; i < s->nsessions; i++)
        if (strcmp(s->sessions[i]->id, id) == 0)
            return s->sessions[i];
    return NULL;
}

static sched_session_t *session_get(gs_sched_t *s, const char *id)
{
    sched_session_t *ss = sched_session_find(s, id);
    if (ss)
        return ss;
    ss = calloc(1, sizeof *ss);
    if (!ss)
        abort();
    snprintf(ss->id, sizeof ss->id, "%s", id);
    for (int i = 0; i < GS_SCHED_MAX_GPUS; i++)
        ss->g[i].deadline = GS_SCHED_NEVER;
    s->sessions = grow(s->sessions, &s->capsessions, s->nsessions + 1, sizeof *s->sessions);
    s->sessions[s->nsessions++] = ss;
    return ss;
}

static void session_remove(gs_sched_t *s, sched_session_t *ss)
{
    for (int i = 0; i < s->nsessions; i++)
        if (s->sessions[i] == ss) {
            s->sessions[i] = s->sessions[--s->nsessions];
            break;
        }
    session_free(ss);
}

static sched_client_t *client_find(const gs_sched_t *s, const char *id)
{
    for (int i = 0; i < s->nclients; i++)
        if (strcmp(s->clients[i]->id, id) == 0)
            return s->clients[i];
    return NULL;
}

/* The only writers of a client's wants and used_bytes: they keep the
 * session's running totals (sess_gpu_t) in step. */
static void set_wants(sched_client_t *c, int gpu, int on)
{
    client_gpu_t *cg = &c->g[gpu];
    on = on != 0;
    if (cg->wants != on)
        c->session->g[gpu].nwants += on ? 1 : -1;
    cg->wants = on;
}

static void set_used(sched_client_t *c, int gpu, uint64_t bytes)
{
    client_gpu_t *cg = &c->g[gpu];
    sess_gpu_t *g = &c->session->g[gpu];
    g->footprint = g->footprint - cg->used_bytes + bytes;
    cg->used_bytes = bytes;
}

uint64_t sched_footprint(const gs_sched_t *s, const sched_session_t *ss, int gpu)
{
    (void)s;
    return ss->g[gpu].footprint;
}

static int session_wants(const gs_sched_t *s, const sched_session_t *ss, int gpu)
{
    (void)s;
    return ss->g[gpu].nwants > 0;
}

int sched_session_wants(const gs_sched_t *s, const sched_session_t *ss, int gpu)
{
    return session_wants(s, ss, gpu);
}

int sched_grantable(const gs_sched_t *s, const sched_session_t *ss, int gpu)
{
    return ss->residency == GS_SCHED_RESIDENT && session_wants(s, ss, gpu);
}

void sched_shares(const gs_sched_t *s, const char *session, double *request, double *limit)
{
    *request = s->cfg.request;
    *limit = s->cfg.limit;
    for (int i = 0; i < s->nshares; i++)
        if (strcmp(s->shares[i].session, session) == 0) {
            if (s->shares[i].request >= 0)
                *request = s->shares[i].request;
            if (s->shares[i].limit >= 0)
                *limit = s->shares[i].limit;
        }
    /* A default request raised above a session's own limit (set_share
     * checks only the share being set): the limit is hard, so the request
     * is the limit. */
    if (*request > *limit)
        *request = *limit;
}

/* ---- actions -------------------------------------------------------------- */

void sched_emit(gs_sched_t *s, gs_sched_act_kind_t kind, const char *client, int gpu,
                uint64_t grant_id, int64_t quantum, const char *reason)
{
    if (s->headacts == s->nacts)
        s->headacts = s->nacts = 0;
    s->acts = grow(s->acts, &s->capacts, s->nacts + 1, sizeof *s->acts);
    gs_sched_action_t *a = &s->acts[s->nacts++];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    snprintf(a->client, sizeof a->client, "%s", client);
    a->gpu = gpu;
    a->grant_id = grant_id;
    a->quantum_us = quantum;
    a->reason = reason;
}

int gs_sched_pop_action(gs_sched_t *s, gs_sched_action_t *out)
{
    if (s->headacts >= s->nacts)
        return 0;
    *out = s->acts[s->headacts++];
    return 1;
}

/* ---- holds ---------------------------------------------------------------- */

static void grant_client(gs_sched_t *s, sched_client_t *c, int gpu, int64_t now)
{
    sess_gpu_t *g = &c->session->g[gpu];
    client_gpu_t *cg = &c->g[gpu];
    set_wants(c, gpu, 0);
    int again = cg->grant_id != 0;
    if (!again) {
        cg->grant_id = ++s->next_grant_id;
        cg->revoked = 0;
        g->nheld++;
    }
    int64_t left = g->deadline != GS_SCHED_NEVER && g->deadline > now ? g->deadline - now : 0;
    sched_emit(s, GS_ACT_GRANT, c->id, gpu, cg->grant_id, left, NULL);
    gs_sched_action_t *a = &s->acts[s->nacts - 1];
    a->idle_release_us = g->hint;
    a->again = again;
    a->turn = g->turn_start ? g->turns : 0;
}

void sched_hint(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t hint, int64_t now)
{
    sess_gpu_t *g = &ss->g[gpu];
    if (g->hint == hint || !g->holding || g->revoking)
        return;
    g->hint = hint;
    for (int i = 0; i < s->nclients; i++) /* the same grants again, with the hint */
        if (s->clients[i]->session == ss && s->clients[i]->g[gpu].grant_id &&
            !s->clients[i]->g[gpu].revoked)
            grant_client(s, s->clients[i], gpu, now);
}

/* A busy period starts; a running cell keeps the mark it set. */
static void mark_active(const sched_session_t *ss, sess_gpu_t *g, int64_t now)
{
    if (g->active_since)
        return;
    g->active_since = now;
    if (!ss->cell_busy)
        g->gpu_mark = g->gpu_time;
}

static void enqueue(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t now)
{
    sess_gpu_t *g = &ss->g[gpu];
    if (g->waiting || g->holding)
        return;
    g->waiting = 1;
    g->used = 1;
    g->wait_start = now;
    g->queue_seq = ++s->next_queue_seq;
    mark_active(ss, g, now);
}

static void dequeue(sess_gpu_t *g, int64_t now)
{
    if (!g->waiting)
        return;
    g->wait_time += now - g->wait_start;
    g->waiting = 0;
}

void sched_session_grant(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t quantum, int boosting,
                         int64_t now)
{
    sess_gpu_t *g = &ss->g[gpu];
    if (ss->residency != GS_SCHED_RESIDENT)
        return; /* parked or moving: keeps its place until it is back */
    if (!session_wants(s, ss, gpu)) {
        if (!g->demand)
            dequeue(g, now); /* nobody to grant: a hold without grants would never end */
        return;              /* demand: keeps its place until its acquire arrives */
    }
    if (!sched_gang_ready(ss, gpu))
        return; /* keeps its place until it holds the lower GPUs of its gang */
    dequeue(g, now);
    g->demand = 0;
    ss->last_active = now;
    g->holding = 1;
    g->used = 1;
    g->revoking = NULL;
    g->nheld = 0;
    g->hold_start = now;
    /* Every policy's grant begins a turn when none is under way (adaptive
     * began its own): a session whose cell runs is switched out only when
     * its turn is over, or its GPU idles longer than a switch costs
     * (sched_switchable).  Without a turn, the exclusive policy's holders
     * were switched out at every CPU phase of their cells: 32 GiB pairs on
     * the H200 switched every 2 s instead of every 20 s. */
    if (quantum > 0 && !sched_turn_live(g, now))
        sched_turn_begin(g, quantum, now);
    g->quantum = quantum > 0 ? quantum : 0;
    g->deadline = quantum > 0 ? now + quantum : GS_SCHED_NEVER;
    g->grants++;
    g->hint = s->contended[gpu] ? sched_idle_hint(g) : 0;
    g->boosting = boosting;
    g->boost_start = now;
    g->boost_share = 1;
    mark_active(ss, g, now);
    for (int i = 0; i < s->nclients; i++)
        if (s->clients[i]->session == ss && s->clients[i]->g[gpu].wants)
            grant_client(s, s->clients[i], gpu, now);
}

int64_t sched_boost_left(const sess_gpu_t *g, int64_t now)
{
    if (!g->boosting)
        return g->boost_left;
    int64_t left =
        g->boost_left - (now - g->boost_start) / (g->boost_share > 1 ? g->boost_share : 1);
    return left > 0 ? left : 0;
}

void sched_boost_count(sess_gpu_t *g, int share, int64_t now)
{
    g->boost_left = sched_boost_left(g, now);
    g->boost_start = now;
    g->boost_share = share > 0 ? share : 1;
    g->boosting = share > 0;
}

static void end_boost(sess_gpu_t *g, int64_t now)
{
    if (g->boosting)
        sched_boost_count(g, 0, now);
}

void sched_session_revoke(gs_sched_t *s, sched_session_t *ss, int gpu, const char *reason,
                          int64_t now)
{
    sess_gpu_t *g = &ss->g[gpu];
    if (!g->holding || g->revoking)
        return;
    g->revoking = reason;
    g->revokes++;
    end_boost(g, now);
    sched_turn_over(g); /* revoked: its turn is over, whatever the reason */
    for (int i = 0; i < s->nclients; i++) {
        sched_client_t *c = s->clients[i];
        client_gpu_t *cg = &c->g[gpu];
        if (c->session == ss && cg->grant_id && !cg->revoked) {
            cg->revoked = 1;
            sched_emit(s, GS_ACT_REVOKE, c->id, gpu, cg->grant_id, 0, reason);
        }
    }
    sched_gang_revoke(s, ss, gpu, reason, now);
}

static void hist_add(gs_sched_t *s, sess_gpu_t *g, int64_t start, int64_t end)
{
    int drop = 0;
    while (drop < g->nhist && g->hist[drop].end <= end - s->cfg.window_us)
        drop++;
    if (g->nhist - drop >= MAX_HIST)
        drop++;
    if (drop) {
        memmove(g->hist, g->hist + drop, (size_t)(g->nhist - drop) * sizeof *g->hist);
        g->nhist -= drop;
    }
    g->hist = grow(g->hist, &g->caphist, g->nhist + 1, sizeof *g->hist);
    g->hist[g->nhist++] = (interval_t){start, end};
}

static void end_hold(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t now)
{
    sess_gpu_t *g = &ss->g[gpu];
    ss->last_active = now;
    end_boost(g, now);
    if (!g->revoking)
        sched_gap_open(ss, g, now); /* gave it back by itself: its turn goes on */
    g->hint = 0;
    g->holding = 0;
    g->revoking = NULL;
    g->nheld = 0;
    g->gpu_time += now - g->hold_start;
    if (now > g->hold_start)
        hist_add(s, g, g->hold_start, now);
    g->deadline = GS_SCHED_NEVER;
    g->quantum = 0;
    if (session_wants(s, ss, gpu))
        enqueue(s, ss, gpu, now);
    else
        g->active_since = 0;
}

static void client_release_gpu(gs_sched_t *s, sched_client_t *c, int gpu, int64_t now)
{
    client_gpu_t *cg = &c->g[gpu];
    sess_gpu_t *g = &c->session->g[gpu];
    cg->grant_id = 0;
    cg->revoked = 0;
    if (--g->nheld <= 0 && g->holding)
        end_hold(s, c->session, gpu, now);
}

int64_t sched_window_used(const sess_gpu_t *g, int64_t now, int64_t window)
{
    int64_t from = now - window, used = 0;
    for (int i = 0; i < g->nhist; i++) {
        int64_t a = g->hist[i].start > from ? g->hist[i].start : from;
        int64_t b = g->hist[i].end < now ? g->hist[i].end : now;
        if (b > a)
            used += b - a;
    }
    if (g->holding) {
        int64_t a = g->hold_start > from ? g->hold_start : from;
        if (now > a)
            used += now - a;
    }
    return used;
}

/* ---- deciding -------------------------------------------------------------- */

static void decide_all(gs_sched_t *s, int64_t now)
{
    s->last_now = now;
    s->dirty = 0;
    for (int i = 0; i < s->ngpus; i++)
        s->wake[i] = sched_decide(s, i, now);
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
    sched_session_t *ss = session_get(s, session);
    ss->registered = 1;
    if (!ss->last_active)
        ss->last_active = now;
    decide_all(s, now);
}

int gs_sched_unregister(gs_sched_t *s, const char *session, int64_t now)
{
    sched_session_t *ss = sched_session_find(s, session);
    if (!ss || !ss->registered)
        return -1;
    ss->registered = 0;
    ss->cell_busy = 0;
    for (int i = 0; i < s->ngpus; i++) {
        ss->g[i].boost_left = 0;
        end_boost(&ss->g[i], now);
        if (s->cfg.enabled)
            sched_session_revoke(s, ss, i, "cell_idle", now);
    }
    if (ss->nclients == 0)
        session_remove(s, ss);
    decide_all(s, now);
    return 0;
}

/* A waiter queued only by demand leaves the queue. */
static void drop_demand(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t now)
{
    sess_gpu_t *g = &ss->g[gpu];
    if (!g->demand)
        return;
    g->demand = 0;
    if (g->waiting && !session_wants(s, ss, gpu)) {
        dequeue(g, now);
        g->active_since = 0;
    }
}

int gs_sched_cell(gs_sched_t *s, const char *session, int busy, int64_t now)
{
    sched_session_t *ss = sched_session_find(s, session);
    if (!ss)
        return -1;
    ss->last_active = now;
    if (busy != ss->cell_busy)
        sched_think_mark(ss, busy, now);
    if (busy && !ss->cell_busy) {
        ss->cell_busy = 1;
        ss->cell_start = now;
        for (int i = 0; i < s->ngpus; i++) {
            sess_gpu_t *g = &ss->g[i];
            g->boost_left = s->cfg.boost_us;
            g->gaps_stale = 1; /* (sched_gap_close) */
            g->gpu_mark = g->gpu_time + (g->holding ? now - g->hold_start : 0);
        }
    } else if (!busy) {
        ss->cell_busy = 0;
        for (int i = 0; i < s->ngpus; i++) {
            end_boost(&ss->g[i], now);
            ss->g[i].boost_left = 0;
            sched_turn_over(&ss->g[i]); /* the next cell starts afresh */
            ss->g[i].released_at = 0;   /* (between cells the user thinks: no gap) */
            if (s->cfg.enabled)
                sched_session_revoke(s, ss, i, "cell_idle", now);
            drop_demand(s, ss, i, now); /* the cell that waited is over */
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
        set_wants(c, i, 0);
        set_used(c, i, 0);
        if (cg->grant_id)
            client_release_gpu(s, c, i, now);
        if (ss->g[i].waiting && !ss->g[i].demand && !session_wants(s, ss, i)) {
            dequeue(&ss->g[i], now);
            ss->g[i].active_since = 0;
        }
    }
    c->session = NULL;
    ss->nclients--;
}

int gs_sched_join(gs_sched_t *s, const char *client, const char *session, int64_t now)
{
    sched_client_t *c = client_find(s, client);
    if (c && strcmp(c->session->id, session) == 0)
        return 0;
    if (c) {
        sched_session_t *old = c->session;
        client_detach(s, c, now);
        if (!old->registered && old->nclients == 0)
            session_remove(s, old);
    } else {
        c = calloc(1, sizeof *c);
        if (!c)
            abort();
        snprintf(c->id, sizeof c->id, "%s", client);
        s->clients = grow(s->clients, &s->capclients, s->nclients + 1, sizeof *s->clients);
        s->clients[s->nclients++] = c;
    }
    c->session = session_get(s, session);
    c->session->nclients++;
    if (!c->session->last_active)
        c->session->last_active = now;
    decide_all(s, now);
    return 0;
}

int gs_sched_client_gone(gs_sched_t *s, const char *client, int64_t now)
{
    sched_client_t *c = client_find(s, client);
    if (!c)
        return -1;
    sched_session_t *ss = c->session;
    client_detach(s, c, now);
    for (int i = 0; i < s->nclients; i++)
        if (s->clients[i] == c) {
            s->clients[i] = s->clients[--s->nclients];
            break;
        }
    free(c);
    int removed = 0;
    if (!ss->registered && ss->nclients == 0) {
        session_remove(s, ss);
        removed = 1;
    }
    decide_all(s, now);
    return removed;
}

int gs_sched_acquire(gs_sched_t *s, const char *client, int gpu, int64_t p90, int64_t last,
                     int64_t now)
{
    sched_client_t *c = client_find(s, client);
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
        grant_client(s, c, gpu, now); /* asked again while holding: same grant */
        return 0;
    }
    set_wants(c, gpu, 1);
    sched_gap_close(c->session, g, now);
    if (g->holding && !g->revoking && !cg->grant_id && c->session->residency == GS_SCHED_RESIDENT)
        grant_client(s, c, gpu, now); /* its session holds the GPU */
    else
        enqueue(s, c->session, gpu, now); /* no-op while its session still holds */
    decide_all(s, now);
    return 0;
}

int gs_sched_release(gs_sched_t *s, const char *client, int gpu, uint64_t grant_id, int64_t now)
{
    sched_client_t *c = client_find(s, client);
    if (!c || gpu < 0 || gpu >= s->ngpus)
        return -1;
    if (!grant_id || c->g[gpu].grant_id != grant_id)
        return 1;
    c->session->last_active = now;
    client_release_gpu(s, c, gpu, now);
    decide_all(s, now);
    return 0;
}

int gs_sched_memory(gs_sched_t *s, const char *client, int gpu, uint64_t used_bytes, int64_t now)
{
    sched_client_t *c = client_find(s, client);
    if (!c || gpu < 0 || gpu >= s->ngpus)
        return -1;
    set_used(c, gpu, used_bytes);
    if (used_bytes)
        c->session->g[gpu].used = 1;
    decide_all(s, now);
    return 0;
}

/* ---- parking ---------------------------------------------------------------- */

int gs_sched_set_residency(gs_sched_t *s, const char *session, gs_sched_residency_t r, int64_t now)
{
    sched_session_t *ss = sched_session_find(s, session);
    if (!ss)
        return -1;
    if (r != GS_SCHED_RESIDENT && ss->residency == GS_SCHED_RESIDENT)
        for (int i = 0; i < s->ngpus; i++) {
            end_boost(&ss->g[i], now);
            sched_session_revoke(s, ss, i, "park", now); /* even with the scheduler off */
            sched_turn_over(&ss->g[i]);                  /* switched out */
            if (ss->g[i].released_at)
                ss->g[i].gap_switched = 1; /* (sched_gap_close) */
        }
    ss->residency = r;
    decide_all(s, now);
    return 0;
}

int gs_sched_demand(gs_sched_t *s, const char *session, int gpu, int on, int64_t now)
{
    sched_session_t *ss = sched_session_find(s, session);
    if (!ss || gpu < 0 || gpu >= s->ngpus)
        return -1;
    sess_gpu_t *g = &ss->g[gpu];
    if (on && !g->demand) {
        g->demand = 1;
        enqueue(s, ss, gpu, now); /* no-op while it holds or waits already */
    } else if (!on) {
        drop_demand(s, ss, gpu, now);
    }
    decide_all(s, now);
    return 0;
}

int gs_sched_set_move(gs_sched_t *s, const char *session, int gpu, const gs_sched_move_t *m)
{
    sched_session_t *ss = sched_session_find(s, session);
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

int gs_sched_session_holding(const gs_sched_t *s, const char *session)
{
    const sched_session_t *ss = sched_session_find(s, session);
    for (int i = 0; ss && i < s->ngpus; i++)
        if (ss->g[i].holding)
            return 1;
    return 0;
}

/* ---- queries --------------------------------------------------------------- */

int gs_sched_has_session(const gs_sched_t *s, const char *session)
{
    return sched_session_find(s, session) != NULL;
}

int gs_sched_session_registered(const gs_sched_t *s, const char *session)
{
    const sched_session_t *ss = sched_session_find(s, session);
    return ss && ss->registered;
}

int gs_sched_client_grants(const gs_sched_t *s, const char *client)
{
    const sched_client_t *c = client_find(s, client);
    if (!c)
        return -1;
    int n = 0;
    for (int i = 0; i < s->ngpus; i++)
        n += c->g[i].grant_id != 0;
    return n;
}

int gs_sched_session_used_gpu(const gs_sched_t *s, const char *session, int gpu)
{
    const sched_session_t *ss = sched_session_find(s, session);
    return ss && gpu >= 0 && gpu < s->ngpus && ss->g[gpu].used;
}

int gs_sched_info(const gs_sched_t *s, const char *session, int gpu, int64_t now,
                  gs_sched_info_t *out)
{
    const sched_session_t *ss = sched_session_find(s, session);
    memset(out, 0, sizeof *out);
    if (!ss || gpu < 0 || gpu >= s->ngpus)
        return -1;
    const sess_gpu_t *g = &ss->g[gpu];
    out->state = g->holding ? GS_SESS_RUNNING : g->waiting ? GS_SESS_WAITING : GS_SESS_IDLE;
    out->gpu_time_us = g->gpu_time + (g->holding ? now - g->hold_start : 0);
    out->wait_time_us = g->wait_time + (g->waiting ? now - g->wait_start : 0);
    out->grants = g->grants;
    out->revokes = g->revokes;
    out->resident_bytes = sched_footprint(s, ss, gpu);
    out->quantum_us = g->holding ? g->quantum : 0;
    out->boosted = g->boosting;
    out->boost_left_us = sched_boost_left(g, now);
    sched_shares(s, ss->id, &out->request, &out->limit);
    out->share_used = s->cfg.window_us > 0 ? (double)sched_window_used(g, now, s->cfg.window_us) /
                                                 (double)s->cfg.window_us
                                           : 0.0;
    out->tau_us = g->tau;
    out->registered = ss->registered;
    out->cell_busy = ss->cell_busy;
    out->cell_start_us = ss->cell_start;
    out->last_active_us = ss->last_active;
    out->wants = session_wants(s, ss, gpu);
    out->demand = g->demand;
    out->residency = ss->residency;
    out->switch_cost_us = sched_switch_cost(g);
    out->min_slice_us = SCHED_SLICE_FACTOR * out->switch_cost_us;
    out->turn_end_us = sched_turn_end(g);
    out->idle_gap_us = sched_idle_gap(g);
    out->think_gap_us = sched_think_gap(ss);
    out->switchable = sched_switchable(ss, g, now, &out->switchable_at_us);
    return 0;
}

static int cmp_holders(const void *a, const void *b, void *arg)
{
    int gpu = *(const int *)arg;
    const sess_gpu_t *x = &(*(sched_session_t *const *)a)->g[gpu];
    const sess_gpu_t *y = &(*(sched_session_t *const *)b)->g[gpu];
    if (x->hold_start != y->hold_start)
        return x->hold_start < y->hold_start ? -1 : 1;
    return x->queue_seq < y->queue_seq ? -1 : x->queue_seq > y->queue_seq;
}

static int cmp_waiters(const void *a, const void *b, void *arg)
{
    int gpu = *(const int *)arg;
    const sess_gpu_t *x = &(*(sched_session_t *const *)a)->g[gpu];
    const sess_gpu_t *y = &(*(sched_session_t *const *)b)->g[gpu];
    return x->queue_seq < y->queue_seq ? -1 : x->queue_seq > y->queue_seq;
}

sched_session_t **sched_list(const gs_sched_t *s, int gpu, int holders, int *n)
{
    sched_session_t **arr = malloc(((size_t)s->nsessions + 1) * sizeof *arr);
    if (!arr)
        abort();
    *n = 0;
    for (int i = 0; i < s->nsessions; i++) {
        const sess_gpu_t *g = &s->sessions[i]->g[gpu];
        if (holders ? g->holding : g->waiting)
            arr[(*n)++] = s->sessions[i];
    }
    qsort_r(arr, (size_t)*n, sizeof *arr, holders ? cmp_holders : cmp_waiters, &gpu);
    return arr;
}

static json_t *ids_json(const gs_sched_t *s, int gpu, int holders)
{
    json_t *arr = json_array();
    if (gpu < 0 || gpu >= s->ngpus)
        return arr;
    int n;
    sched_session_t **list = sched_list(s, gpu, holders, &n);
    for (int i = 0; i < n; i++)
        json_array_append_new(arr, json_string(list[i]->id));
    free(list);
    return arr;
}

int gs_sched_wait_info(const gs_sched_t *s, const char *client, int gpu, int64_t now,
                       gs_sched_wait_t *out)
{
    memset(out, 0, sizeof *out);
    sched_client_t *c = client_find(s, client);
    if (!c || gpu < 0 || gpu >= s->ngpus || c->g[gpu].grant_id || !c->g[gpu].wants)
        return 0;
    int n;
    sched_session_t **list = sched_list(s, gpu, 1, &n);
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
