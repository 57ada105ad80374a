/*
 * scheduler_state.c - the scheduler's tables and the per-session state the
 * rest of broker/sched reads (scheduler_state.h): sessions and clients
 * found, made and dropped, the running totals of wants and memory, shares,
 * the hold history of the burst window, lists of holders and waiters, the
 * boost's GPU time and the queue of actions.  Calls nothing above it: the
 * holds, policies and public API build on it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* qsort_r */
#endif
#include "scheduler_state.h"

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

static void session_free(sched_session_t *ss)
{
    for (int i = 0; i < GS_SCHED_MAX_GPUS; i++)
        free(ss->g[i].hist);
    free(ss);
}

void sched_state_free(gs_sched_t *s)
{
    for (int i = 0; i < s->nsessions; i++)
        session_free(s->sessions[i]);
    for (int i = 0; i < s->nclients; i++)
        free(s->clients[i]);
    free(s->sessions);
    free(s->clients);
    free(s->shares);
    free(s->acts);
    s->sessions = NULL;
    s->clients = NULL;
    s->shares = NULL;
    s->acts = NULL;
    s->nsessions = s->nclients = s->nshares = s->nacts = s->headacts = 0;
    s->capsessions = s->capclients = s->capshares = s->capacts = 0;
}

/* ---- sessions and clients ---------------------------------------------------- */

sched_session_t *sched_state_session_find(const gs_sched_t *s, const char *id)
{
    for (int i = 0; i < s->nsessions; i++)
        if (strcmp(s->sessions[i]->id, id) == 0)
            return s->sessions[i];
    return NULL;
}

sched_session_t *sched_state_session_get(gs_sched_t *s, const char *id)
{
    sched_session_t *ss = sched_state_session_find(s, id);
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

void sched_state_session_remove(gs_sched_t *s, sched_session_t *ss)
{
    for (int i = 0; i < s->nsessions; i++)
        if (s->sessions[i] == ss) {
            s->sessions[i] = s->sessions[--s->nsessions];
            break;
        }
    session_free(ss);
}

sched_client_t *sched_state_client_find(const gs_sched_t *s, const char *id)
{
    for (int i = 0; i < s->nclients; i++)
        if (strcmp(s->clients[i]->id, id) == 0)
            return s->clients[i];
    return NULL;
}

sched_client_t *sched_state_client_add(gs_sched_t *s, const char *id)
{
    sched_client_t *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    snprintf(c->id, sizeof c->id, "%s", id);
    s->clients = grow(s->clients, &s->capclients, s->nclients + 1, sizeof *s->clients);
    s->clients[s->nclients++] = c;
    return c;
}

void sched_state_client_remove(gs_sched_t *s, sched_client_t *c)
{
    for (int i = 0; i < s->nclients; i++)
        if (s->clients[i] == c) {
            s->clients[i] = s->clients[--s->nclients];
            break;
        }
    free(c);
}

/* ---- running totals ---------------------------------------------------------- */

void sched_state_set_wants(sched_client_t *c, int gpu, int on)
{
    client_gpu_t *cg = &c->g[gpu];
    on = on != 0;
    if (cg->wants != on)
        c->session->g[gpu].nwants += on ? 1 : -1;
    cg->wants = on;
}

void sched_state_set_used(sched_client_t *c, int gpu, uint64_t bytes)
{
    client_gpu_t *cg = &c->g[gpu];
    sess_gpu_t *g = &c->session->g[gpu];
    g->footprint = g->footprint - cg->used_bytes + bytes;
    cg->used_bytes = bytes;
}

uint64_t sched_state_footprint(const gs_sched_t *s, const sched_session_t *ss, int gpu)
{
    (void)s;
    return ss->g[gpu].footprint;
}

int sched_state_wants(const gs_sched_t *s, const sched_session_t *ss, int gpu)
{
    (void)s;
    return ss->g[gpu].nwants > 0;
}

int sched_state_grantable(const gs_sched_t *s, const sched_session_t *ss, int gpu)
{
    return ss->residency == GS_SCHED_RESIDENT && sched_state_wants(s, ss, gpu);
}

void sched_state_shares(const gs_sched_t *s, const char *session, double *request, double *limit)
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

/* ---- hold history ------------------------------------------------------------ */

void sched_state_hist_add(gs_sched_t *s, sess_gpu_t *g, int64_t start, int64_t end)
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

int64_t sched_state_window_used(const sess_gpu_t *g, int64_t now, int64_t window)
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

/* ---- holders and waiters ----------------------------------------------------- */

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

sched_session_t **sched_state_list(const gs_sched_t *s, int gpu, int holders, int *n)
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

/* ---- boost ------------------------------------------------------------------- */

int64_t sched_state_boost_left(const sess_gpu_t *g, int64_t now)
{
    if (!g->boosting)
        return g->boost_left;
    int64_t left =
        g->boost_left - (now - g->boost_start) / (g->boost_share > 1 ? g->boost_share : 1);
    return left > 0 ? left : 0;
}

void sched_state_boost_count(sess_gpu_t *g, int share, int64_t now)
{
    g->boost_left = sched_state_boost_left(g, now);
    g->boost_start = now;
    g->boost_share = share > 0 ? share : 1;
    g->boosting = share > 0;
}

void sched_state_boost_end(sess_gpu_t *g, int64_t now)
{
    if (g->boosting)
        sched_state_boost_count(g, 0, now);
}

/* ---- actions ----------------------------------------------------------------- */

gs_sched_action_t *sched_state_emit(gs_sched_t *s, gs_sched_act_kind_t kind, const char *client,
                                    int gpu, uint64_t grant_id, int64_t quantum, const char *reason)
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
    return a;
}
