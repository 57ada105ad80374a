/*
 * session_place.c - where sessions run, as the broker's state sees it
 * (session_place.h): the answer to a hook's hello, the gang a joining hook
 * brings, and parking's moves between GPUs.
 *
 * A hello names a session by the name its process was given
 * (GPUSHARE_SESSION): like every message, it names one of the sender's own
 * sessions (sessions.h), so nobody can place another user's session, nor
 * place one first, before its owner's process asks.
 *
 * The session usually does not exist yet when its first process asks (it
 * exists once the process joins, or the launcher registers it), and a
 * hello may name sessions that never will: 100 000 hellos with junk ids
 * grew the broker by 47 MB and wrote as many log lines.  Such a placement
 * is pending (placement.h): it goes when nothing joined and the process
 * that asked is gone for GS_PLACE_PENDING_HOLD_US, and a uid holds at most
 * GS_PLACE_PENDING_PER_UID (its oldest goes first).  Its log line and "placed" event are limited
 * per uid (log_limit.h).
 */
#include "session_place.h"

#include <string.h>

#include "clock.h"
#include "log.h"
#include "proc_alive.h"

/* What placement weighs per GPU: the memory and the number of the
 * sessions placed there. */
typedef struct {
    gs_broker_t *b;
    gs_place_gpu_t gpus[GS_PLACE_MAX_GPUS];
    int64_t now;
} place_view_t;

static void add_placed(const char *session, const int *gpus, int n, void *arg)
{
    place_view_t *v = arg;
    for (int i = 0; i < n; i++) {
        gs_sched_info_t si;
        v->gpus[gpus[i]].sessions++;
        if (gs_sched_info(v->b->sched, session, gpus[i], v->now, &si) == 0)
            v->gpus[gpus[i]].committed += si.resident_bytes;
    }
}

static int asker_alive(long pid, unsigned long long start, void *arg)
{
    (void)arg;
    return gs_proc_alive(pid, start);
}

/* The line and the event of a new placement, unless the sender's lines
 * are held back (log_limit.h). */
static void say_placed(gs_broker_t *b, const char *session, const int *gpus, int k,
                       const char *policy, int64_t now)
{
    unsigned long held = 0;
    if (!gs_log_limit_allow(b->log_limit, b->peer.uid, now, &held))
        return;
    char more[96] = "";
    if (held)
        snprintf(more, sizeof more, " (%lu more lines from uid %u not logged)", held,
                 (unsigned)b->peer.uid);
    gs_info("session %s placed on GPU %d%s (%s)%s", session, gpus[0], k > 1 ? " and more" : "",
            policy, more);
    if (!b->eventlog)
        return;
    json_t *uuids = json_array();
    for (int i = 0; i < k; i++)
        json_array_append_new(uuids, json_string(b->inventory.gpus[gpus[i]].uuid));
    json_t *ev =
        json_pack("{s:s, s:o, s:s}", "session", session, "devices", uuids, "policy", policy);
    if (ev && held)
        json_object_set_new(ev, "not_logged", json_integer((json_int_t)held));
    gs_eventlog_write(b->eventlog, "placed", ev);
}

/* Places a new session: its GPUs in gpus[], their count (0: not placed). */
static int place_new(gs_broker_t *b, const json_t *hello, const char *session, int *gpus)
{
    int n = b->inventory.count;
    int64_t now = gs_clock_now_us();
    /* Room under the sender's cap first, and its placements whose asking
     * process is gone out of the view. */
    gs_placement_prune(b->placements, b->peer.uid, GS_PLACE_PENDING_PER_UID, now,
                       GS_PLACE_PENDING_HOLD_US, asker_alive, NULL);
    place_view_t v = {.b = b, .now = now};
    for (int g = 0; g < n; g++)
        v.gpus[g].capacity = b->inventory.gpus[g].memory_total;
    gs_placement_each(b->placements, add_placed, &v);
    int want = (int)gs_msg_int(hello, "gpus", 1);
    uint64_t allowed = gs_gpu_access_mask(&b->gpu_access, b->peer.uid);
    const char *policy = gs_place_policy_name((gs_place_policy_t)b->placement);
    int k = gs_place_choose((gs_place_policy_t)b->placement, v.gpus, n, want, allowed, gpus);
    if (!k) {
        if (gs_log_limit_allow(b->log_limit, b->peer.uid, now, NULL))
            gs_warn("session %s: gpu_access allows its user none of this server's GPUs; not "
                    "placed",
                    session);
        return 0;
    }
    /* A session that exists (joined before placement was on) owns its
     * placement at once; else it is pending until one joins. */
    int rc = gs_sessions_session(b->sessions, session, 0)
                 ? gs_placement_set(b->placements, session, gpus, k)
                 : gs_placement_set_pending(b->placements, session, gpus, k, b->peer.uid,
                                            (long)b->peer.pid, gs_proc_start(b->peer.pid), now);
    if (rc != 0)
        return 0;
    say_placed(b, session, gpus, k, policy, now);
    return k;
}

json_t *gs_session_place_hello(gs_broker_t *b, const json_t *hello)
{
    const char *name = gs_msg_str(hello, "session", NULL);
    const char *visible = gs_msg_str(hello, "visible", NULL);
    int n = b->inventory.count;
    if (b->placement == GS_PLACE_OFF || n < 2 || n > GS_PLACE_MAX_GPUS || !name || !b->placements ||
        !b->peer.valid || strcmp(gs_msg_str(hello, "role", ""), "hook") != 0 ||
        !json_is_true(json_object_get(hello, "place")))
        return NULL; /* only a hook that asks is placed (hook_place.c) */
    char session[GS_SESSION_ID_MAX];
    if (gs_sessions_key(b->sessions, b->peer.uid, name, session, sizeof session) != 0)
        return NULL;
    int gpus[GS_PLACE_MAX_GPUS], k = gs_placement_get(b->placements, session, gpus, n);
    if (!k && visible) {
        if (gs_log_limit_allow(b->log_limit, b->peer.uid, gs_clock_now_us(), NULL))
            gs_info("session %s: its spawner set CUDA_VISIBLE_DEVICES=%.200s; left as it is",
                    session, visible);
        return NULL;
    }
    if (!k && !(k = place_new(b, hello, session, gpus)))
        return NULL;
    json_t *list = json_array();
    for (int i = 0; i < k; i++)
        json_array_append_new(list, json_string(b->inventory.gpus[gpus[i]].uuid));
    return list;
}

/* ---- joins ---------------------------------------------------------------- */

/* A session placed on several GPUs holds them together, in GPU order
 * (scheduler_gang.c).  Its placement, or, when this broker does not know
 * it (it was restarted), the GPUs the joining hook was placed on (`gang`:
 * its `devices`), which are remembered as the session's placement. */
void gs_session_place_join(gs_broker_t *b, const char *session, const json_t *msg)
{
    int gpus[GS_PLACE_MAX_GPUS], n = b->inventory.count;
    if (n < 2 || n > GS_PLACE_MAX_GPUS || !b->placements)
        return;
    int k = gs_placement_get(b->placements, session, gpus, n);
    if (!k && json_is_true(json_object_get(msg, "gang"))) {
        char seen[GS_PLACE_MAX_GPUS] = {0};
        size_t i;
        const json_t *d;
        json_array_foreach(json_object_get(msg, "devices"), i, d)
        {
            int g = gs_gpu_inventory_find(&b->inventory, json_string_value(d));
            if (g < 0)
                return; /* not all of them are this machine's: no gang */
            seen[g] = 1;
        }
        for (int g = 0; g < n; g++)
            if (seen[g])
                gpus[k++] = g;
        if (k >= 2 && gs_placement_set(b->placements, session, gpus, k) != 0)
            k = 0;
    }
    if (k >= 2)
        gs_sched_set_gang(b->sched, session, gpus, k);
}

/* ---- parking's moves (park.h gs_park_move_hooks_t) --------------------------- */

/* Parking may restore a parked session onto another GPU (park_move.c) only
 * where the broker placed it (a spawner's choice stays) and its user may
 * run (gpu_access). */
int gs_session_place_may_move(void *arg, const char *session, int gpu)
{
    gs_broker_t *b = arg;
    int gpus[GS_PLACE_MAX_GPUS];
    if (b->placement == GS_PLACE_OFF ||
        gs_placement_get(b->placements, session, gpus, GS_PLACE_MAX_GPUS) != 1)
        return 0;
    const gs_session_t *s = gs_sessions_session(b->sessions, session, 0);
    uint64_t allowed =
        s && s->owner_known ? gs_gpu_access_mask(&b->gpu_access, s->owner_uid) : ~0ull;
    return gpu >= 0 && gpu < 64 && (allowed >> gpu & 1u);
}

/* It runs there now: its later processes are placed there too. */
void gs_session_place_moved(void *arg, const char *session, int from, int to)
{
    gs_broker_t *b = arg;
    (void)from;
    if (gs_placement_set(b->placements, session, &to, 1) != 0)
        gs_warn("session %s: could not record its move to GPU %d (out of memory)", session, to);
}

/* ---- a session's life ------------------------------------------------------- */

void gs_session_place_made(gs_broker_t *b, const char *session)
{
    if (b->placements)
        gs_placement_confirm(b->placements, session);
}

void gs_session_place_gone(gs_broker_t *b, const char *session)
{
    if (b->placements) /* gone: its GPUs count for nobody now */
        gs_placement_forget(b->placements, session);
}

const char *gs_session_place_policy_name(const gs_broker_t *b)
{
    return gs_place_policy_name((gs_place_policy_t)b->placement);
}
