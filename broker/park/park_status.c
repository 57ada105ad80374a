/*
 * park_status.c - parking in `gpushare status --json` (fields documented in
 * doc/protocol.md, status_reply): per session and GPU where its memory is
 * and what parking it cost, per GPU what is parked, and parking's settings
 * and state as a whole.
 */
#include <string.h>

#include "park.h"
#include "park_eligible.h"
#include "park_ledger.h"

static json_t *num_or_null(double v)
{
    return v < 0 ? json_null() : json_real(v);
}

/* "resident", "parking", "parked", "unparking", "failed: <why>" or
 * "not parkable: <why>". */
static json_t *parking_state(const gs_park_t *p, const psess_t *ps, const char *session,
                             int64_t now)
{
    static const char *const moving[] = {
        [PS_REVOKING] = "parking", [PS_PARKING] = "parking", [PS_UNPARKING] = "unparking"};
    char text[600];
    if (ps && (ps->st == PS_REVOKING || ps->st == PS_PARKING || ps->st == PS_UNPARKING))
        return json_string(moving[ps->st]);
    if (ps && ps->failed) {
        snprintf(text, sizeof text, "failed: %s", ps->why);
        return json_string(text);
    }
    if (ps && ps->st == PS_PARKED)
        return json_string("parked");
    char why[300];
    if (park_eligible_why_not(p, session, now, why, sizeof why))
        snprintf(text, sizeof text, "not parkable: %s", why);
    else
        snprintf(text, sizeof text, "resident");
    return json_string(text);
}

static void session_status(const gs_park_t *p, const char *session, int gpu, int64_t now, json_t *e)
{
    const psess_t *ps = zhashx_lookup(p->sess, session);
    int away = ps && (ps->st == PS_PARKED || ps->st == PS_UNPARKING);
    uint64_t parked = away && gpu < GS_MAX_GPUS ? ps->bytes[gpu] : 0;
    if (ps && ps->st == PS_PARKED)
        json_object_set_new(e, "state", json_string("parked"));
    if (away) { /* parked in part (a switch): the rest is still on the GPU */
        json_int_t foot = json_integer_value(json_object_get(e, "resident_bytes"));
        json_int_t left = ps->partial && foot > (json_int_t)parked ? foot - (json_int_t)parked : 0;
        json_object_set_new(e, "resident_bytes", json_integer(left));
    }
    json_object_set_new(e, "parked_bytes", json_integer((json_int_t)parked));
    /* What it needs free on the GPU to come back (its parked memory and
     * the driver's rounding margin): the capacity a user is waiting for. */
    if (parked)
        json_object_set_new(e, "back_needs_bytes",
                            json_integer((json_int_t)(parked + park_state_margin(p, gpu))));
    json_object_set_new(e, "parking", parking_state(p, ps, session, now));
    /* `park` asked for it: parked once the session is idle */
    json_object_set_new(e, "park_asked", json_boolean(ps && ps->asked));
    json_object_set_new(e, "parks", json_integer(ps ? (json_int_t)ps->parks : 0));
    json_object_set_new(e, "unparks", json_integer(ps ? (json_int_t)ps->unparks : 0));
    json_object_set_new(e, "last_park_s", num_or_null(ps ? ps->park_s : -1));
    json_object_set_new(e, "last_park_gbps", num_or_null(ps ? ps->park_gbps : -1));
    json_object_set_new(e, "last_unpark_s", num_or_null(ps ? ps->unpark_s : -1));
    json_object_set_new(e, "last_unpark_gbps", num_or_null(ps ? ps->unpark_gbps : -1));
    json_object_set_new(e, "park_error", ps && ps->why[0] ? json_string(ps->why) : json_null());
    /* Restored onto another GPU (park_move.c), or why the driver would not. */
    if (ps && ps->moves)
        json_object_set_new(e, "moves", json_integer((json_int_t)ps->moves));
    if (ps && ps->move_refused[0])
        json_object_set_new(e, "move_refused", json_string(ps->move_refused));
    json_object_set_new(e, "park_tier",
                        ps && ps->st != PS_RESIDENT
                            ? json_string(ps->tier == TIER_SWAP ? "swap" : "checkpoint")
                            : json_null());
}

static void gpu_status(const gs_park_t *p, int gpu, json_t *e)
{
    uint64_t parked = 0;
    for (const psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess))
        if (ps->st == PS_PARKED || ps->st == PS_UNPARKING)
            parked += ps->bytes[gpu];
    json_object_set_new(
        e, "parking", json_string(p->api && p->cfg.enabled && !p->cfg.gpu_off[gpu] ? "on" : "off"));
    json_object_set_new(e, "memory_parked", json_integer((json_int_t)parked));
    /* The tier of the last copy here (before any, the checkpoint tier), and
     * both tiers' estimates: switches are priced with them. */
    int t = p->last_tier[gpu];
    json_object_set_new(e, "park_gbps", json_real(p->out_bps[t][gpu] / 1e9));
    json_object_set_new(e, "unpark_gbps", json_real(p->in_bps[t][gpu] / 1e9));
    json_object_set_new(e, "swap_park_gbps", json_real(p->out_bps[TIER_SWAP][gpu] / 1e9));
    json_object_set_new(e, "swap_unpark_gbps", json_real(p->in_bps[TIER_SWAP][gpu] / 1e9));
    json_object_set_new(e, "checkpoint_park_gbps",
                        json_real(p->out_bps[TIER_CHECKPOINT][gpu] / 1e9));
    json_object_set_new(e, "checkpoint_unpark_gbps",
                        json_real(p->in_bps[TIER_CHECKPOINT][gpu] / 1e9));
}

static json_t *park_status(const gs_park_t *p)
{
    int rooms = 0;
    for (room_t *r = p->rooms; r; r = r->next)
        rooms++;
    json_t *o =
        json_pack("{s:b, s:b, s:I, s:I, s:f, s:i}", "available", p->api != NULL, "enabled",
                  p->api && p->cfg.enabled, "host_budget_bytes", (json_int_t)p->cfg.host_budget,
                  "host_parked_bytes", (json_int_t)park_state_host_used(p), "idle_s",
                  (double)p->cfg.idle_us / 1e6, "room_requests", rooms);
    if (!p->api)
        json_object_set_new(o, "problem", json_string(p->unavailable));
    json_object_set_new(o, "last_refusal",
                        p->last_refusal[0] ? json_string(p->last_refusal) : json_null());
    /* The swap tier's host memory, per GPU (pinned, lent, free, pinning). */
    json_object_set_new(o, "swap_tier",
                        json_string(p->pools ? (p->cfg.swap ? "on" : "off") : "unavailable"));
    if (!p->pools && p->swap_unavailable[0])
        json_object_set_new(o, "swap_problem", json_string(p->swap_unavailable));
    if (p->pools)
        json_object_set_new(o, "pool", gs_swap_pools_status(p->pools));
    /* Capacity: the host ledger (park_ledger.c), what bounds it, and the
     * room a parked session needs on its GPU to come back. */
    json_object_set_new(o, "host", park_ledger_json(p));
    return o;
}

void gs_park_status_add(const gs_park_t *p, json_t *st, int64_t now)
{
    if (!p || !st)
        return;
    json_t *gpus = json_object_get(st, "gpus");
    for (size_t i = 0; i < json_array_size(gpus) && (int)i < p->ngpus; i++) {
        json_t *g = json_array_get(gpus, i);
        json_t *sessions = json_object_get(g, "sessions");
        json_int_t used = 0;
        for (size_t k = 0; k < json_array_size(sessions); k++) {
            json_t *e = json_array_get(sessions, k);
            const char *id = json_string_value(json_object_get(e, "id"));
            if (id)
                session_status(p, id, (int)i, now, e);
            used += json_integer_value(json_object_get(e, "resident_bytes"));
        }
        json_object_set_new(g, "memory_used", json_integer(used));
        gpu_status(p, (int)i, g);
    }
    json_object_set_new(st, "parking", park_status(p));
    json_t *cfg = json_object_get(st, "config");
    json_t *ours = gs_park_config_json_of(p);
    if (json_is_object(cfg))
        json_object_update(cfg, ours);
    json_decref(ours);
}
