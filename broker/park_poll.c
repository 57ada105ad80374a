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
 *
 * Free memory is estimated from the hooks' reports: the GPU's size less
 * the footprints of sessions not parked and the room promised to requests
 * answered in the last second.  The broker never creates a CUDA context, so
 * it cannot ask the driver; memory outside gpushare is not seen (a request
 * whose estimate says it already fits is given its full size by parking).
 */
#include <string.h>

#include "log.h"
#include "park_internal.h"

#define SEC          1000000LL
#define ROOM_WAIT_US (25 * SEC) /* under the hook's 30 s make_room timeout */
#define ROOM_ROUNDS  3          /* victim sets tried for one request */
/* Before saying "nothing to park", a request waits this long for news: the
 * end of another notebook's cell comes from its launcher on another
 * connection and may arrive just after the allocation that needs its room. */
#define ROOM_GRACE_US (500 * 1000LL)
#define MIB           1048576.0

typedef struct {
    gs_session_t *s;
    psess_t *ps;
    gs_sched_info_t si[GS_MAX_GPUS];
    uint64_t foot[GS_MAX_GPUS]; /* the hooks' reports */
    uint64_t host;              /* on all GPUs */
    int holding, wants, demand, cell_busy, registered;
    int64_t last_active;
    char reason[96]; /* why it cannot be parked; "" = it can */
} view_t;

typedef struct {
    view_t *v;
    int n;
} views_t;

typedef struct {
    int64_t since;
    int late; /* unparked only when it fits without parking anyone */
    room_t *room;
    view_t *v;
} need_t;

static const char *mib(char *buf, size_t len, uint64_t bytes)
{
    if (bytes >= (1ull << 30))
        snprintf(buf, len, "%.1f GiB", bytes / (MIB * 1024));
    else
        snprintf(buf, len, "%.1f MiB", bytes / MIB);
    return buf;
}

/* ---- the sessions as they are now ------------------------------------------- */

static views_t build_views(gs_broker_t *b, int64_t now)
{
    gs_park_t *p = b->park;
    views_t vs = {NULL, 0};
    size_t cap = 16;
    vs.v = calloc(cap, sizeof *vs.v);
    for (gs_session_t *s = gs_sessions_first_session(b->sessions); s && vs.v;
         s = gs_sessions_next_session(b->sessions)) {
        if ((size_t)vs.n == cap) {
            view_t *nv = realloc(vs.v, 2 * cap * sizeof *nv);
            if (!nv)
                break;
            vs.v = nv;
            cap *= 2;
        }
        view_t *v = &vs.v[vs.n];
        memset(v, 0, sizeof *v);
        v->s = s;
        if (!(v->ps = park_sess(p, s->id, 1)))
            continue;
        for (int g = 0; g < p->ngpus; g++) {
            gs_sched_info_t *si = &v->si[g];
            if (gs_sched_info(b->sched, s->id, g, now, si) != 0)
                continue;
            v->foot[g] = si->resident_bytes;
            v->host += si->resident_bytes;
            v->holding |= si->state == GS_SESS_RUNNING;
            v->wants |= si->wants;
            v->demand |= si->demand;
            v->cell_busy = si->cell_busy;
            v->registered = si->registered;
            if (si->last_active_us > v->last_active)
                v->last_active = si->last_active_us;
        }
        vs.n++;
    }
    for (int i = 0; i < vs.n; i++) /* this iterates the client table */
        park_unparkable(p, vs.v[i].s->id, vs.v[i].reason, sizeof vs.v[i].reason);
    return vs;
}

/* Forget the records of sessions the broker has forgotten. */
static void prune(gs_park_t *p, const views_t *vs)
{
    zlistx_t *gone = zlistx_new();
    for (psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess)) {
        int seen = 0;
        for (int i = 0; i < vs->n && !seen; i++)
            seen = vs->v[i].ps == ps;
        if (!seen && !ps->job)
            zlistx_add_end(gone, ps->id);
    }
    for (char *id = zlistx_first(gone); id; id = zlistx_next(gone))
        zhashx_delete(p->sess, id);
    zlistx_destroy(&gone);
}

static uint64_t free_est(const gs_park_t *p, const views_t *vs, int g)
{
    int64_t left = (int64_t)p->total[g];
    for (int i = 0; i < vs->n; i++)
        if (vs->v[i].ps->st != PS_PARKED)
            left -= (int64_t)vs->v[i].foot[g];
    for (int i = 0; i < p->nresv; i++)
        if (p->resv[i].gpu == g)
            left -= (int64_t)p->resv[i].bytes;
    return left > 0 ? (uint64_t)left : 0;
}

/* Sizes are rounded up by the driver: keep a little more free than asked. */
static uint64_t margin(const gs_park_t *p, int g)
{
    return p->total[g] / 100 > (2u << 20) ? p->total[g] / 100 : (2u << 20);
}

static int parks_in_flight(const views_t *vs, int g)
{
    for (int i = 0; i < vs->n; i++) {
        const psess_t *ps = vs->v[i].ps;
        if ((ps->st == PS_REVOKING || ps->st == PS_PARKING) && ps->bytes[g])
            return 1;
    }
    return 0;
}

/* ---- victims --------------------------------------------------------------------- */

/* A session unparked for its cell keeps its slice: it is not switched out
 * again before it had a grant or its shortest slice went by. */
static int slice_protected(const view_t *v, int64_t now)
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
    return now - ps->unparked_at < longest;
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
static gs_park_pick_rc_t make_room(gs_broker_t *b, views_t *vs, int g, uint64_t need,
                                   const char *exclude, int allow_switched, int64_t deadline,
                                   int64_t *wait_until, const char *why)
{
    gs_park_t *p = b->park;
    int64_t now = gs_broker_now_us();
    gs_park_cand_t *c = calloc((size_t)vs->n + 1, sizeof *c);
    int *map = calloc((size_t)vs->n + 1, sizeof *map),
        *picked = calloc((size_t)vs->n + 1, sizeof *picked);
    int n = 0;
    for (int i = 0; c && map && picked && i < vs->n; i++) {
        view_t *v = &vs->v[i];
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
        c[n] = (gs_park_cand_t){.bytes = v->foot[g],
                                .host_bytes = v->host,
                                .last_active = v->last_active,
                                .idle = idle,
                                .settling = settling,
                                .switched_out = !idle && !settling && !slice_protected(v, now),
                                .failed = v->ps->failed};
        map[n++] = i;
    }
    uint64_t used = park_host_used(p);
    uint64_t budget_left = p->cfg.host_budget > used ? p->cfg.host_budget - used : 0;
    gs_park_pick_rc_t rc = GS_PICK_NONE;
    if (c && map && picked)
        rc = gs_park_choose(c, n, need, allow_switched, budget_left, now, p->cfg.idle_us, deadline,
                            picked, wait_until);
    for (int k = 0; rc == GS_PICK_OK && k < n; k++)
        if (picked[k] && park_start(b, vs->v[map[k]].ps, why) != 0)
            rc = GS_PICK_NONE; /* cannot happen: the reason was checked */
    free(c);
    free(map);
    free(picked);
    return rc;
}

/* The reason of a refusal: where the memory is. */
static void explain(gs_park_t *p, const views_t *vs, int g, uint64_t need, const char *exclude,
                    gs_park_pick_rc_t rc, char *out, size_t len)
{
    char a[32], bb[32], c[32], d[32];
    if (rc == GS_PICK_BUDGET) {
        snprintf(out, len,
                 "parking would exceed the host budget for parked memory (park_host_budget %s, "
                 "%s parked)",
                 mib(a, sizeof a, p->cfg.host_budget), mib(bb, sizeof bb, park_host_used(p)));
        return;
    }
    uint64_t busy = 0, young = 0, cannot = 0;
    int64_t now = gs_broker_now_us();
    for (int i = 0; i < vs->n; i++) {
        const view_t *v = &vs->v[i];
        if (v->ps->st == PS_PARKED || (exclude && !strcmp(v->s->id, exclude)))
            continue;
        if (v->reason[0])
            cannot += v->foot[g];
        else if (v->holding || v->cell_busy || v->wants || v->demand)
            busy += v->foot[g];
        else if (now - v->last_active < p->cfg.idle_us)
            young += v->foot[g];
    }
    snprintf(out, len,
             "not enough memory can be parked (%s more needed): %s in busy sessions (running "
             "cells or grants), %s idle for less than park_idle_s, %s in sessions that cannot "
             "be parked",
             mib(a, sizeof a, need), mib(bb, sizeof bb, busy), mib(c, sizeof c, young),
             mib(d, sizeof d, cannot));
}

/* ---- make_room ---------------------------------------------------------------------- */

void park_room_reply(gs_broker_t *b, room_t *r, int ok, uint64_t free_bytes, const char *reason)
{
    json_t *m = gs_msg_new(GS_MSG_ROOM);
    json_object_set_new(m, "device", json_string(b->inventory.gpus[r->gpu].uuid));
    json_object_set_new(m, "ok", json_boolean(ok));
    json_object_set_new(m, "free_bytes", json_integer((json_int_t)free_bytes));
    if (reason)
        json_object_set_new(m, "reason", json_string(reason));
    if (r->seq >= 0)
        json_object_set_new(m, "seq", json_integer(r->seq));
    if (ok)
        gs_info("room for %.1f MiB on GPU %d for session %s (%.1f MiB free)", r->bytes / MIB,
                r->gpu, r->session, free_bytes / MIB);
    else {
        gs_info("no room for %.1f MiB on GPU %d for session %s: %s", r->bytes / MIB, r->gpu,
                r->session, reason);
        if (b->park)
            snprintf(b->park->last_refusal, sizeof b->park->last_refusal,
                     "%.1f MiB for session %.64s on GPU %d: %.400s", r->bytes / MIB, r->session,
                     r->gpu, reason);
    }
    gs_eventlog_write(b->eventlog, "room",
                      json_pack("{s:s, s:s, s:I, s:b, s:I, s:s?}", "session", r->session, "gpu",
                                b->inventory.gpus[r->gpu].uuid, "bytes", (json_int_t)r->bytes, "ok",
                                ok, "free_bytes", (json_int_t)free_bytes, "reason", reason));
    gs_broker_reply(b, r->peer, m);
}

static void room_done(gs_park_t *p, room_t *r)
{
    for (room_t **pp = &p->rooms; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    zframe_destroy(&r->peer);
    free(r);
}

static void reserve(gs_park_t *p, const views_t *vs, room_t *r, int64_t now)
{
    if (p->nresv == PARK_MAX_RESV)
        return;
    resv_t *v = &p->resv[p->nresv++];
    snprintf(v->session, sizeof v->session, "%s", r->session);
    v->gpu = r->gpu;
    v->bytes = r->bytes;
    v->base = 0;
    for (int i = 0; i < vs->n; i++)
        if (!strcmp(vs->v[i].s->id, r->session))
            v->base = vs->v[i].foot[r->gpu];
    v->until = now + SEC;
}

/* 1: answered (go on with the next need); 0: it waits. */
static int serve_room(gs_broker_t *b, views_t *vs, room_t *r, int64_t now)
{
    gs_park_t *p = b->park;
    uint64_t free_now = free_est(p, vs, r->gpu);
    if (free_now >= r->goal) {
        park_room_reply(b, r, 1, free_now, NULL);
        reserve(p, vs, r, now);
        room_done(p, r);
        return 1;
    }
    if (parks_in_flight(vs, r->gpu))
        return 0;
    if (r->fail[0] || r->rounds >= ROOM_ROUNDS || now >= r->deadline) {
        park_room_reply(b, r, 0, free_now,
                        r->fail[0]           ? r->fail
                        : now >= r->deadline ? "timed out waiting for sessions to become idle"
                                             : "parked sessions did not free enough memory");
        room_done(p, r);
        return 1;
    }
    int64_t wait_until = 0;
    char why[200];
    snprintf(why, sizeof why, "make room for %.1f MiB for session %.64s", r->bytes / MIB,
             r->session);
    gs_park_pick_rc_t rc =
        make_room(b, vs, r->gpu, r->goal - free_now, r->session, 0, r->deadline, &wait_until, why);
    if (rc == GS_PICK_OK) {
        r->rounds++;
        return 0;
    }
    if (rc == GS_PICK_WAIT || (rc == GS_PICK_NONE && now < r->since + ROOM_GRACE_US)) {
        if (rc != GS_PICK_WAIT)
            wait_until = r->since + ROOM_GRACE_US;
        if (wait_until < p->wake)
            p->wake = wait_until;
        return 0;
    }
    char reason[400];
    explain(p, vs, r->gpu, r->goal - free_now, r->session, rc, reason, sizeof reason);
    park_room_reply(b, r, 0, free_now, reason);
    room_done(p, r);
    return 1;
}

void gs_park_make_room(gs_broker_t *b, zframe_t *peer, const char *client, int gpu, uint64_t bytes,
                       long long seq)
{
    gs_park_t *p = b->park;
    gs_client_t *c = gs_sessions_client_by_key(b->sessions, client);
    room_t tmp = {.peer = peer, .seq = seq, .gpu = gpu, .bytes = bytes};
    snprintf(tmp.session, sizeof tmp.session, "%s", c ? c->session : "?");
    char no[260] = "";
    if (!p || !p->api)
        snprintf(no, sizeof no, "parking is unavailable: %s", p ? p->unavailable : "?");
    else if (!p->cfg.enabled)
        snprintf(no, sizeof no, "parking is off");
    else if (p->cfg.gpu_off[gpu])
        snprintf(no, sizeof no, "parking is off on this GPU");
    if (no[0]) {
        park_room_reply(b, &tmp, 0, 0, no);
        return;
    }
    room_t *r = calloc(1, sizeof *r);
    if (!r) {
        park_room_reply(b, &tmp, 0, 0, "the broker is out of memory");
        return;
    }
    *r = tmp;
    snprintf(r->client, sizeof r->client, "%s", client);
    r->peer = zframe_dup(peer);
    r->since = gs_broker_now_us();
    r->deadline = r->since + ROOM_WAIT_US;
    views_t vs = build_views(b, r->since);
    uint64_t free_now = free_est(p, &vs, gpu);
    if (free_now >= bytes) /* memory the hooks did not report: park the whole size */
        r->goal = free_now + bytes + margin(p, gpu);
    else
        r->goal = bytes + margin(p, gpu);
    if (r->goal > p->total[gpu])
        r->goal = p->total[gpu];
    free(vs.v);
    room_t **pp = &p->rooms;
    while (*pp)
        pp = &(*pp)->next;
    *pp = r;
    gs_broker_sched_flush(b); /* serves it */
}

/* ---- parked sessions that need the GPU -------------------------------------------------- */

static int fits_back(const gs_park_t *p, const views_t *vs, const psess_t *ps)
{
    for (int g = 0; g < p->ngpus; g++)
        if (ps->bytes[g] && free_est(p, vs, g) < ps->bytes[g] + margin(p, g))
            return 0;
    return 1;
}

/* Tell the scheduler which parked sessions wait for the GPU (their cell
 * cannot ask), and take the demand back from those that got it. */
static void update_demand(gs_broker_t *b, views_t *vs, int64_t now)
{
    gs_park_t *p = b->park;
    for (int i = 0; i < vs->n; i++) {
        view_t *v = &vs->v[i];
        psess_t *ps = v->ps;
        int parked = ps->st == PS_PARKED || ps->st == PS_UNPARKING;
        /* The scheduler queues a parked session for its cell; one left
         * stuck by a failure is brought back too, but holds nobody up. */
        int want = parked && ((v->registered && v->cell_busy) || v->wants);
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
                gs_sched_demand(b->sched, ps->id, g, 0, now);
                p->changed = 1;
            } else if (parked && queue && ps->bytes[g] && !v->si[g].demand && !v->si[g].wants &&
                       v->si[g].state != GS_SESS_RUNNING) {
                gs_sched_demand(b->sched, ps->id, g, 1, now);
                p->changed = 1;
            } else if (ps->st == PS_RESIDENT && v->si[g].demand && !v->si[g].wants &&
                       now >= ps->demand_expire) {
                gs_sched_demand(b->sched, ps->id, g, 0, now); /* no acquire came */
                p->changed = 1;
            }
        }
        if (ps->st == PS_RESIDENT && ps->demand_expire > now && ps->demand_expire < p->wake)
            p->wake = ps->demand_expire;
    }
}

/* 1: go on with the next need; 0: it waits. */
static int serve_unpark(gs_broker_t *b, views_t *vs, view_t *v, int g, int late, int64_t now)
{
    gs_park_t *p = b->park;
    psess_t *ps = v->ps;
    if (ps->st != PS_PARKED)
        return 1; /* coming back already: its memory is counted */
    if (ps->retry_at > now) {
        if (ps->retry_at < p->wake)
            p->wake = ps->retry_at;
        return 1; /* a failed unpark waits for its retry without holding others up */
    }
    if (fits_back(p, vs, ps)) {
        park_start_unpark(b, ps,
                          ps->stuck                       ? "bring it back after a failure"
                          : v->registered && v->cell_busy ? "its cell started"
                          : v->wants                      ? "it asked for the GPU"
                                                          : "its memory fits again");
        return 1;
    }
    if (late || parks_in_flight(vs, g))
        return late;
    char why[200];
    snprintf(why, sizeof why, "make room to unpark session %.64s", ps->id);
    int64_t wait_until = 0;
    uint64_t free_now = free_est(p, vs, g);
    uint64_t need = ps->bytes[g] + margin(p, g) - free_now;
    gs_park_pick_rc_t rc = make_room(b, vs, g, need, ps->id, 1, INT64_MAX, &wait_until, why);
    if (rc == GS_PICK_WAIT && wait_until < p->wake)
        p->wake = wait_until;
    if (rc == GS_PICK_BUDGET)
        ps->no_demand = 1;
    if ((rc == GS_PICK_NONE || rc == GS_PICK_BUDGET) && !ps->noted) {
        char reason[400];
        explain(p, vs, g, need, ps->id, rc, reason, sizeof reason);
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

static void serve_gpu(gs_broker_t *b, views_t *vs, int g, int64_t now)
{
    gs_park_t *p = b->park;
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
        view_t *v = &vs->v[i];
        if (v->ps->st != PS_PARKED || !v->ps->bytes[g])
            continue;
        if (v->ps->demand_since)
            needs[n++] = (need_t){v->ps->demand_since, 0, NULL, v};
        else if (v->reason[0] || (!v->registered && p->cfg.plain))
            needs[n++] = (need_t){v->ps->since, 1, NULL, v}; /* parking off now, or plain */
    }
    qsort(needs, (size_t)n, sizeof *needs, cmp_need);
    for (int k = 0; k < n; k++) {
        int go_on = needs[k].room ? serve_room(b, vs, needs[k].room, now)
                                  : serve_unpark(b, vs, needs[k].v, g, needs[k].late, now);
        if (!go_on)
            break;
    }
    free(needs);
}

/* ---- the poll ---------------------------------------------------------------------------- */

static void expire_reservations(gs_park_t *p, const views_t *vs, int64_t now)
{
    int n = 0;
    for (int i = 0; i < p->nresv; i++) {
        resv_t *r = &p->resv[i];
        int shown = 0;
        for (int k = 0; k < vs->n; k++)
            if (!strcmp(vs->v[k].s->id, r->session))
                shown = vs->v[k].foot[r->gpu] >= r->base + r->bytes;
        if (now < r->until && !shown)
            p->resv[n++] = *r;
    }
    p->nresv = n;
    for (int i = 0; i < n; i++)
        if (p->resv[i].until < p->wake)
            p->wake = p->resv[i].until;
}

static void poll_once(gs_broker_t *b)
{
    gs_park_t *p = b->park;
    int64_t now = gs_broker_now_us();
    p->wake = INT64_MAX;
    views_t vs = build_views(b, now);
    if (!vs.v)
        return;
    prune(p, &vs);
    expire_reservations(p, &vs, now);
    /* Victims whose grant was revoked start once they have let go. */
    for (int i = 0; i < vs.n; i++) {
        psess_t *ps = vs.v[i].ps;
        if (ps->st == PS_REVOKING && !gs_sched_session_holding(b->sched, ps->id))
            park_submit(p, ps);
    }
    /* A parked session's memory, as its hooks report it (an adopted one
     * is only known so). */
    for (int i = 0; i < vs.n; i++)
        for (int g = 0; g < p->ngpus && vs.v[i].ps->st == PS_PARKED; g++)
            if (vs.v[i].foot[g] > vs.v[i].ps->bytes[g])
                vs.v[i].ps->bytes[g] = vs.v[i].foot[g];
    update_demand(b, &vs, now);
    /* Stuck with no memory known: nothing to make room for. */
    for (int i = 0; i < vs.n; i++) {
        psess_t *ps = vs.v[i].ps;
        uint64_t any = 0;
        for (int g = 0; g < p->ngpus; g++)
            any |= ps->bytes[g];
        if (ps->st == PS_PARKED && ps->stuck && !any && ps->retry_at <= now)
            park_start_unpark(b, ps, "bring it back after a failure");
    }
    for (int g = 0; g < p->ngpus; g++)
        serve_gpu(b, &vs, g, now);
    free(vs.v);
}

/* Anything to look at?  Most events (acquire, release) come while nothing
 * is parked or asked for: then the poll costs one pass over a small table. */
static int anything(gs_park_t *p, int64_t now)
{
    if (p->rooms || p->nresv)
        return 1;
    for (const psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess))
        if (ps->st != PS_RESIDENT || ps->stuck || ps->demand_expire > now - SEC)
            return 1; /* (a demand is taken back 2 s after an unpark) */
    return 0;
}

int gs_park_poll(gs_broker_t *b)
{
    gs_park_t *p = b->park;
    if (!p || !p->api)
        return 0;
    if (!anything(p, gs_broker_now_us())) {
        p->wake = INT64_MAX;
        return 0;
    }
    if (p->polling) {
        p->again = 1;
        return 0;
    }
    p->polling = 1;
    p->changed = 0;
    int rounds = 0;
    do {
        p->again = 0;
        poll_once(b);
    } while (p->again && ++rounds < 4);
    p->polling = 0;
    return p->changed;
}

int64_t gs_park_next_deadline(const gs_park_t *p)
{
    return p && p->api ? p->wake : INT64_MAX;
}
