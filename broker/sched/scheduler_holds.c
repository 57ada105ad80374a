/*
 * scheduler_holds.c - holds, queues and revokes (scheduler_holds.h): who
 * holds a GPU and who waits for it, the grant and revoke actions that
 * follow, and the accounting of each hold.  Below the policies and the
 * events that use it; above the tables (scheduler_state.c), turns
 * (scheduler_turns.c) and gangs (scheduler_gang.c) it reads.
 */
#include "scheduler_holds.h"

#include "scheduler_gang.h"
#include "scheduler_turns.h"

#include <stddef.h>

void sched_holds_grant_client(gs_sched_t *s, sched_client_t *c, int gpu, int64_t now)
{
    sess_gpu_t *g = &c->session->g[gpu];
    client_gpu_t *cg = &c->g[gpu];
    sched_state_set_wants(c, gpu, 0);
    int again = cg->grant_id != 0;
    if (!again) {
        cg->grant_id = ++s->next_grant_id;
        cg->revoked = 0;
        g->nheld++;
    }
    int64_t left = g->deadline != GS_SCHED_NEVER && g->deadline > now ? g->deadline - now : 0;
    gs_sched_action_t *a = sched_state_emit(s, GS_ACT_GRANT, c->id, gpu, cg->grant_id, left, NULL);
    a->idle_release_us = g->hint;
    a->again = again;
    a->turn = g->turn_start ? g->turns : 0;
}

void sched_holds_hint(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t hint, int64_t now)
{
    sess_gpu_t *g = &ss->g[gpu];
    if (g->hint == hint || !g->holding || g->revoking)
        return;
    g->hint = hint;
    for (int i = 0; i < s->nclients; i++) /* the same grants again, with the hint */
        if (s->clients[i]->session == ss && s->clients[i]->g[gpu].grant_id &&
            !s->clients[i]->g[gpu].revoked)
            sched_holds_grant_client(s, s->clients[i], gpu, now);
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

void sched_holds_enqueue(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t now)
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

void sched_holds_dequeue(sess_gpu_t *g, int64_t now)
{
    if (!g->waiting)
        return;
    g->wait_time += now - g->wait_start;
    g->waiting = 0;
}

void sched_holds_grant(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t quantum, int boosting,
                       int64_t now)
{
    sess_gpu_t *g = &ss->g[gpu];
    if (ss->residency != GS_SCHED_RESIDENT)
        return; /* parked or moving: keeps its place until it is back */
    if (!sched_state_wants(s, ss, gpu)) {
        if (!g->demand)
            sched_holds_dequeue(g,
                                now); /* nobody to grant: a hold without grants would never end */
        return;                       /* demand: keeps its place until its acquire arrives */
    }
    if (!sched_gang_ready(ss, gpu))
        return; /* keeps its place until it holds the lower GPUs of its gang */
    sched_holds_dequeue(g, now);
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
     * (sched_turns_switchable).  Without a turn, the exclusive policy's holders
     * were switched out at every CPU phase of their cells: 32 GiB pairs on
     * the H200 switched every 2 s instead of every 20 s. */
    if (quantum > 0 && !sched_turns_live(g, now))
        sched_turns_begin(g, quantum, now);
    g->quantum = quantum > 0 ? quantum : 0;
    g->deadline = quantum > 0 ? now + quantum : GS_SCHED_NEVER;
    g->grants++;
    g->hint = s->contended[gpu] ? sched_turns_idle_hint(g) : 0;
    g->boosting = boosting;
    g->boost_start = now;
    g->boost_share = 1;
    mark_active(ss, g, now);
    for (int i = 0; i < s->nclients; i++)
        if (s->clients[i]->session == ss && s->clients[i]->g[gpu].wants)
            sched_holds_grant_client(s, s->clients[i], gpu, now);
}

/* The revoke on one GPU; returns 0 when there was nothing to revoke. */
static int revoke_one(gs_sched_t *s, sched_session_t *ss, int gpu, const char *reason, int64_t now)
{
    sess_gpu_t *g = &ss->g[gpu];
    if (!g->holding || g->revoking)
        return 0;
    g->revoking = reason;
    g->revokes++;
    sched_state_boost_end(g, now);
    sched_turns_over(g); /* revoked: its turn is over, whatever the reason */
    for (int i = 0; i < s->nclients; i++) {
        sched_client_t *c = s->clients[i];
        client_gpu_t *cg = &c->g[gpu];
        if (c->session == ss && cg->grant_id && !cg->revoked) {
            cg->revoked = 1;
            sched_state_emit(s, GS_ACT_REVOKE, c->id, gpu, cg->grant_id, 0, reason);
        }
    }
    return 1;
}

void sched_holds_revoke(gs_sched_t *s, sched_session_t *ss, int gpu, const char *reason,
                        int64_t now)
{
    if (!revoke_one(s, ss, gpu, reason, now) || !sched_gang_member(ss, gpu))
        return;
    /* A gang is revoked whole (scheduler_gang.c): the rest of its GPUs in
     * order, each once (revoke_one returns at once where revoking). */
    for (int j = 0; j < GS_SCHED_MAX_GPUS; j++)
        if (j != gpu && sched_gang_member(ss, j))
            revoke_one(s, ss, j, reason, now);
}

static void end_hold(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t now)
{
    sess_gpu_t *g = &ss->g[gpu];
    ss->last_active = now;
    sched_state_boost_end(g, now);
    if (!g->revoking)
        sched_turns_gap_open(ss, g, now); /* gave it back by itself: its turn goes on */
    g->hint = 0;
    g->holding = 0;
    g->revoking = NULL;
    g->nheld = 0;
    g->gpu_time += now - g->hold_start;
    if (now > g->hold_start)
        sched_state_hist_add(s, g, g->hold_start, now);
    g->deadline = GS_SCHED_NEVER;
    g->quantum = 0;
    if (sched_state_wants(s, ss, gpu))
        sched_holds_enqueue(s, ss, gpu, now);
    else
        g->active_since = 0;
}

void sched_holds_client_release(gs_sched_t *s, sched_client_t *c, int gpu, int64_t now)
{
    client_gpu_t *cg = &c->g[gpu];
    sess_gpu_t *g = &c->session->g[gpu];
    cg->grant_id = 0;
    cg->revoked = 0;
    if (--g->nheld <= 0 && g->holding)
        end_hold(s, c->session, gpu, now);
}

void sched_holds_drop_demand(gs_sched_t *s, sched_session_t *ss, int gpu, int64_t now)
{
    sess_gpu_t *g = &ss->g[gpu];
    if (!g->demand)
        return;
    g->demand = 0;
    if (g->waiting && !sched_state_wants(s, ss, gpu)) {
        sched_holds_dequeue(g, now);
        g->active_since = 0;
    }
}
