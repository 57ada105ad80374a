/*
 * park_room.c - make_room: an allocation did not fit; the hook waits for
 * `room`.  Requests are served in arrival order per GPU, with the parked
 * sessions that need the GPU back (park_poll.c): answered ok once the
 * estimated free memory covers the allocation (plus a margin for the
 * driver's rounding), after parking idle sessions when needed, or ok:false
 * with the reason (where the memory is, the host budget, a failed park,
 * parking off, a timeout).  Room promised to an answered request is
 * reserved until the hook's memory report shows it or the session asks
 * again (at most 5 s and one more per 4 GiB).
 */
#include <string.h>

#include "gpu_free.h"
#include "log.h"
#include "park.h"
#include "park_room.h"
#include "park_victims.h"
#include "protocol.h"

#define SEC          1000000LL
#define ROOM_WAIT_US (25 * SEC) /* a hook that does not say: under its 30 s */
/* A hook that says how long it waits is answered a second before. */
#define ROOM_WAIT_MAX_US (24 * 3600 * SEC)
/* A caching allocator (PyTorch's) that is refused frees its cache and asks
 * again: within this, its second request waits for room. */
#define ROOM_CACHE_US (10 * SEC)
#define ROOM_ROUNDS   3 /* victim sets tried for one request */
#define ROOM_FAILURES 3 /* victims' failed parks one request gets over */
/* Before saying "nothing to park", a request waits this long for news: the
 * end of another notebook's cell comes from its launcher on another
 * connection and may arrive just after the allocation that needs its room. */
#define ROOM_GRACE_US (500 * 1000LL)
/* A request whose room the driver counts otherwise is looked at again this
 * often (the driver's free memory changes without a message). */
#define ROOM_REBASE_US (200 * 1000LL)
#define MIB            1048576.0

void park_room_reply(gs_park_t *p, room_t *r, int ok, uint64_t free_bytes, const char *reason)
{
    json_t *m = gs_msg_new(GS_MSG_ROOM);
    json_object_set_new(m, "device", json_string(p->uuids[r->gpu]));
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
        snprintf(p->last_refusal, sizeof p->last_refusal,
                 "%.1f MiB for session %.64s on GPU %d: %.400s", r->bytes / MIB, r->session, r->gpu,
                 reason);
    }
    gs_eventlog_write(p->eventlog, "room",
                      json_pack("{s:s, s:s, s:I, s:b, s:I, s:s?}", "session", r->session, "gpu",
                                p->uuids[r->gpu], "bytes", (json_int_t)r->bytes, "ok", ok,
                                "free_bytes", (json_int_t)free_bytes, "reason", reason));
    park_state_answer(p, r->peer, m);
}

/* Another request of this session waits too. */
static int asking_room(const gs_park_t *p, const char *session)
{
    for (const room_t *r = p->rooms; r; r = r->next)
        if (!strcmp(r->session, session))
            return 1;
    return 0;
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

/* How long room promised to an answered request stays reserved while the
 * hook's reports do not show it: the allocation that follows takes time,
 * segment by segment on the swap tier, and its report comes after it (on
 * the H100 a 24 GiB one was not reported within the 1 s this used to be,
 * another session was promised the same room, and one of the two ran out
 * of memory): 5 s, and one more for every 4 GiB.  A hook that asks again
 * replaces its promise (unreserve), so a failed allocation holds nobody
 * up for long. */
static int64_t reserved_for(uint64_t bytes)
{
    return 5 * SEC + (int64_t)(bytes >> 32) * SEC;
}

/* A session that asks again had its promise (its allocation failed, or a
 * caching allocator freed its cache and asks once more): the new request
 * replaces it rather than counting beside it. */
static void unreserve(gs_park_t *p, const char *session, int gpu)
{
    int n = 0;
    for (int i = 0; i < p->nresv; i++)
        if (p->resv[i].gpu != gpu || strcmp(p->resv[i].session, session) != 0)
            p->resv[n++] = p->resv[i];
    p->nresv = n;
}

static void reserve(gs_park_t *p, const park_views_t *vs, room_t *r, int64_t now)
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
    v->until = now + reserved_for(r->bytes);
}

/* Whether a request that cannot be served now should wait rather than
 * fail (the allocation then fails as native CUDA would): only while the
 * room may still come, from memory that sessions hold which could become
 * parkable (their cells end, they become idle long enough) or from host
 * memory filled now.  Not for memory of sessions that themselves wait for
 * room (they would wait for each other), nor, at first, when the
 * requester holds as much as it lacks: a caching allocator frees its cache
 * when refused and asks again, and that second request waits. */
static int room_may_wait(gs_park_t *p, const park_views_t *vs, const room_t *r,
                         gs_park_pick_rc_t rc, int64_t now)
{
    if (now >= r->deadline || r->fail[0])
        return 0;
    /* Counted by the driver (rebase) while memory promised to others (an
     * answered request, a session coming back) is not reported yet: that
     * memory counts twice until their reports come, within a second or
     * two.  (On the H100 the two refusals came the moment a third request
     * was answered and a notebook started back.) */
    if (r->unseen && park_views_free(p, vs, r->gpu) < park_views_reported_free(p, vs, r->gpu))
        return 1;
    uint64_t others = 0, own = 0;
    for (int i = 0; i < vs->n; i++) {
        const park_view_t *v = &vs->v[i];
        if (!strcmp(v->s->id, r->session)) {
            own = v->foot[r->gpu];
            continue;
        }
        if (v->ps->st == PS_RESIDENT && (!v->reason[0] || park_state_exiting(v->ps, now)) &&
            !asking_room(p, v->s->id))
            others += v->foot[r->gpu];
    }
    if (!others && rc != GS_PICK_BUDGET)
        return 0;
    const psess_t *ps = park_state_sess(p, r->session, 0);
    int asked_again = ps && ps->room_refused_at && now - ps->room_refused_at < ROOM_CACHE_US;
    return asked_again || own < r->bytes;
}

/* Tell the waiting hook why (once per reason): its wait line shows it. */
static void room_tell(gs_park_t *p, room_t *r, const char *reason)
{
    if (!strcmp(r->told, reason))
        return;
    int first = !r->told[0];
    snprintf(r->told, sizeof r->told, "%s", reason);
    if (first) {
        gs_info("room for %.1f MiB on GPU %d for session %s waits: %s", r->bytes / MIB, r->gpu,
                r->session, reason);
        gs_eventlog_write(p->eventlog, "room_wait",
                          json_pack("{s:s, s:s, s:I, s:s}", "session", r->session, "gpu",
                                    p->uuids[r->gpu], "bytes", (json_int_t)r->bytes, "reason",
                                    reason));
    }
    if (!r->told_ok)
        return;
    json_t *m = gs_msg_new(GS_MSG_ROOM);
    json_object_set_new(m, "device", json_string(p->uuids[r->gpu]));
    json_object_set_new(m, "ok", json_false());
    json_object_set_new(m, "waiting", json_true());
    json_object_set_new(m, "reason", json_string(reason));
    if (r->seq >= 0)
        json_object_set_new(m, "seq", json_integer(r->seq));
    park_state_answer(p, r->peer, m);
}

/* An allocation that failed where the estimate had room met memory that
 * no hook has reported: a program outside gpushare, or allocations made
 * since their hooks' last reports.  Its goal is then the room it needs
 * plus that memory, by the driver's own count (NVML), taken again at
 * every look: memory that is reported meanwhile, or freed, no longer
 * counts.  (The goal used to be fixed at the request, the estimate then
 * plus the allocation: on the H100 two 24 GiB allocations were refused
 * with 29 GiB free, their goal set while three notebooks' new memory was
 * not yet reported.)  Memory promised and already there counts twice here
 * (as promised, and as unseen by the driver) until it is reported: safe,
 * and room_may_wait waits it out.  Without NVML the whole estimate counts
 * as taken, as before. */
static void rebase(gs_park_t *p, const park_views_t *vs, room_t *r, int64_t now)
{
    uint64_t nv_free = 0, nv_total = 0;
    if (!r->unseen || gs_gpu_free_read(p->uuids[r->gpu], &nv_free, &nv_total) != 0)
        return;
    uint64_t reported = park_views_reported_free(p, vs, r->gpu);
    uint64_t unseen = reported > nv_free ? reported - nv_free : 0;
    r->goal = r->bytes + park_state_margin(p, r->gpu) + unseen;
    if (r->goal > p->total[r->gpu])
        r->goal = p->total[r->gpu];
    if (now + ROOM_REBASE_US < p->wake)
        p->wake = now + ROOM_REBASE_US;
}

/* 1: answered (go on with the next need); 0: it waits. */
int park_room_serve(gs_park_t *p, park_views_t *vs, room_t *r, int64_t now)
{
    rebase(p, vs, r, now);
    uint64_t free_now = park_views_free(p, vs, r->gpu);
    if (free_now >= r->goal) {
        park_room_reply(p, r, 1, free_now, NULL);
        reserve(p, vs, r, now);
        room_done(p, r);
        return 1;
    }
    if (park_views_in_flight(vs, r->gpu))
        return 0;
    /* A victim's park failed (its process exited meanwhile, a driver
     * error): others may still make the room, within the request's time
     * (the failed one is tried last). */
    if (r->fail[0] && r->failures < ROOM_FAILURES && now < r->deadline && r->told_ok) {
        r->failures++;
        gs_info("room for %.1f MiB on GPU %d for session %s: %s; trying other sessions",
                r->bytes / MIB, r->gpu, r->session, r->fail);
        r->fail[0] = 0;
        if (r->rounds > 0) /* the deadline bounds these tries, not the rounds */
            r->rounds--;
    }
    if (r->fail[0] || r->rounds >= ROOM_ROUNDS || now >= r->deadline) {
        /* After a wait, its last reason: what the allocation waited for. */
        char waited[480];
        snprintf(waited, sizeof waited, "waited %.0f s: %s", (double)(now - r->since) / SEC,
                 r->told);
        park_room_reply(p, r, 0, free_now,
                        r->fail[0]                         ? r->fail
                        : now >= r->deadline && r->told[0] ? waited
                        : now >= r->deadline ? "timed out waiting for sessions to become idle"
                                             : "parked sessions did not free enough memory");
        room_done(p, r);
        return 1;
    }
    int64_t wait_until = 0;
    char why[200];
    snprintf(why, sizeof why, "make room for %.1f MiB for session %.64s", r->bytes / MIB,
             r->session);
    gs_park_pick_rc_t rc = park_victims(p, vs, r->gpu, r->goal - free_now, r->session, 0,
                                        r->deadline, now, &wait_until, why);
    r->host_bound = rc == GS_PICK_BUDGET;
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
    park_victims_explain(p, vs, r->gpu, r->goal - free_now, r->session, rc, now, reason,
                         sizeof reason);
    if (room_may_wait(p, vs, r, rc, now)) {
        room_tell(p, r, reason);
        if (r->deadline < p->wake)
            p->wake = r->deadline;
        return 0;
    }
    psess_t *ps = park_state_sess(p, r->session, 0);
    if (ps)
        ps->room_refused_at = now;
    park_room_reply(p, r, 0, free_now, reason);
    room_done(p, r);
    return 1;
}

int gs_park_make_room(gs_park_t *p, zframe_t *peer, const char *session, int gpu, uint64_t bytes,
                      long long seq, long long timeout_ms, int64_t now)
{
    room_t tmp = {.peer = peer, .seq = seq, .gpu = gpu, .bytes = bytes};
    snprintf(tmp.session, sizeof tmp.session, "%s", session);
    char no[260] = "";
    if (!p->api)
        snprintf(no, sizeof no, "parking is unavailable: %s", p->unavailable);
    else if (!p->cfg.enabled)
        snprintf(no, sizeof no, "parking is off");
    else if (p->cfg.gpu_off[gpu])
        snprintf(no, sizeof no, "parking is off on this GPU");
    if (no[0]) {
        park_room_reply(p, &tmp, 0, 0, no);
        return 0;
    }
    unreserve(p, session, gpu);
    room_t *r = calloc(1, sizeof *r);
    if (!r) {
        park_room_reply(p, &tmp, 0, 0, "the broker is out of memory");
        return 0;
    }
    *r = tmp;
    r->peer = zframe_dup(peer);
    r->since = now;
    r->deadline = r->since + ROOM_WAIT_US;
    if (timeout_ms > 0) { /* answered a second before the hook gives up */
        if (timeout_ms > ROOM_WAIT_MAX_US / 1000)
            timeout_ms = ROOM_WAIT_MAX_US / 1000;
        int64_t wait = timeout_ms * 1000 - SEC;
        r->deadline = r->since + (wait < SEC                ? timeout_ms * 500
                                  : wait > ROOM_WAIT_MAX_US ? ROOM_WAIT_MAX_US
                                                            : wait);
        r->told_ok = 1;
    }
    park_views_t vs = park_views(p, r->since);
    uint64_t free_now = park_views_free(p, &vs, gpu);
    if (free_now >= bytes) { /* memory the hooks did not report (rebase) */
        r->goal = free_now + bytes + park_state_margin(p, gpu);
        r->unseen = 1;
    } else
        r->goal = bytes + park_state_margin(p, gpu);
    if (r->goal > p->total[gpu])
        r->goal = p->total[gpu];
    free(vs.v);
    room_t **pp = &p->rooms;
    while (*pp)
        pp = &(*pp)->next;
    *pp = r;
    return 1; /* served by gs_park_poll */
}

void park_room_expire(gs_park_t *p, const park_views_t *vs, int64_t now)
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
