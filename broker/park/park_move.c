/*
 * park_move.c - a notebook parked in the deep tier comes back on another
 * GPU of the same model when its own is crowded and another has room
 * (issue 18): cuCheckpointProcessRestore with GPU pairs (CUDA 13).
 *
 * What the driver wants (580, two H200s, tests/gpu/move_probe.c): the pairs
 * name every GPU of the machine once as old and once as new; so a move from
 * GPU a to GPU b is the swap a <-> b with every other GPU onto itself.  The
 * moved process keeps its ordinals, and the driver names its device by the
 * new UUID from then on: its hooks are told (`moved`) and join again, and
 * the broker's placement follows (the hooks' `moved` callback,
 * session_place.c).
 *
 * Moved only: a session of one process (its processes can never end up on
 * two GPUs), on one GPU, no gang, that the broker placed (a spawner's
 * choice is kept), onto a GPU its user may use (gpu_access), with room for
 * all of it.  Where the driver refuses, the session is restored in place,
 * says why, and is not moved again.
 */
#include "park_move.h"

#include <stdio.h>
#include <string.h>

#include "log.h"
#include "protocol.h"

int park_move_target(gs_park_t *p, const park_views_t *vs, const park_view_t *v, int g)
{
    const psess_t *ps = v->ps;
    if (!p->move.allowed || ps->tier != TIER_CHECKPOINT || ps->stuck || ps->no_move ||
        ps->npids != 1 || p->ngpus < 2 || p->ngpus > GS_PARK_MAX_PAIRS ||
        gs_sched_gang(p->sched, ps->id))
        return -1;
    for (int k = 0; k < p->ngpus; k++)
        if (k != g && ps->bytes[k])
            return -1; /* memory on several GPUs */
    int best = -1;
    uint64_t best_free = 0;
    for (int h = 0; h < p->ngpus; h++) {
        if (h == g || strcmp(p->names[h], p->names[g]) != 0 ||
            !p->move.allowed(p->move.arg, ps->id, h))
            continue;
        uint64_t free = park_views_free(p, vs, h);
        if (free >= ps->bytes[g] + park_state_margin(p, h) && free > best_free) {
            best = h;
            best_free = free;
        }
    }
    return best;
}

int park_move_pairs(const gs_park_t *p, int from, int to, gs_park_gpu_pair_t *pairs)
{
    /* The inventory's bytes (a struct it shares with its callers, so the
     * glue library needs none of the broker's code for them). */
    if (!p->inv || p->ngpus > p->inv->count)
        return 0;
    for (int k = 0; k < p->ngpus; k++) {
        int onto = k == from ? to : k == to ? from : k;
        memcpy(pairs[k].old_uuid, p->inv->gpus[k].uuid_bytes, sizeof pairs[k].old_uuid);
        memcpy(pairs[k].new_uuid, p->inv->gpus[onto].uuid_bytes, sizeof pairs[k].new_uuid);
    }
    return p->ngpus;
}

/* Every hook of the session: its device `from` is the GPU `to` now. */
static void tell_hooks(gs_park_t *p, const char *session, int from, int to)
{
    gs_sessions_t *tab = p->sessions;
    for (gs_client_t *c = gs_sessions_first_client(tab); c; c = gs_sessions_next_client(tab)) {
        if (strcmp(c->session, session) != 0 || strcmp(c->role, "hook") != 0 || !c->identity)
            continue;
        json_t *m = gs_msg_new(GS_MSG_MOVED);
        json_object_set_new(m, "device", json_string(p->uuids[from]));
        json_object_set_new(m, "to", json_string(p->uuids[to]));
        park_state_answer(p, c->identity, m);
    }
}

void park_move_finish(gs_park_t *p, psess_t *ps, const gs_park_job_t *j, int64_t now)
{
    int from = ps->move_from, to = ps->move_to;
    ps->move_from = ps->move_to = -1;
    if (from < 0 || to < 0)
        return;
    uint64_t bytes = ps->bytes[from];
    if (j->moved) {
        ps->moves++;
        ps->bytes[to] = bytes;
        ps->bytes[from] = 0;
        gs_sched_demand(p->sched, ps->id, from, 0, now);
        tell_hooks(p, ps->id, from, to);
        if (p->move.moved)
            p->move.moved(p->move.arg, ps->id, from, to);
        gs_info("session %s moved from GPU %d to GPU %d (%.1f MiB): GPU %d had no room for it",
                ps->id, from, to, bytes / 1048576.0, from);
        gs_eventlog_write(p->eventlog, "moved",
                          json_pack("{s:s, s:s, s:s, s:I}", "session", ps->id, "from",
                                    p->uuids[from], "to", p->uuids[to], "bytes",
                                    (json_int_t)bytes));
    } else if (j->move_refused[0]) {
        ps->no_move = 1;
        snprintf(ps->move_refused, sizeof ps->move_refused,
                 "stays on GPU %d: the driver refused to restore it onto GPU %d (%.300s)", from, to,
                 j->move_refused);
        gs_warn("session %s %s", ps->id, ps->move_refused);
        gs_eventlog_write(p->eventlog, "move_refused",
                          json_pack("{s:s, s:s, s:s, s:s}", "session", ps->id, "from",
                                    p->uuids[from], "to", p->uuids[to], "error", j->move_refused));
    }
}
