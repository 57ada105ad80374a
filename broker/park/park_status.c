/*
 * park_status.c - parking in `gpushare status --json` (fields documented in
 * doc/protocol.md, status_reply): per session and GPU where its memory is
 * and what parking it cost, per GPU what is parked, and parking's settings
 * and state as a whole.
 */
#include <string.h>

#include "park.h"
#include "park_disk.h"
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

/* The tier its memory is on: "swap" (the host pool), "disk" (moved on
 * from there) or "checkpoint". */
static const char *tier_of(const psess_t *ps)
{
    if (ps->tier != TIER_SWAP)
        return "checkpoint";
    return ps->disk == DISK_ON || ps->disk == DISK_READING ? "disk" : "swap";
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
                        ps && ps->st != PS_RESIDENT ? json_string(tier_of(ps)) : json_null());
    /* Seconds of copying under way, in words (the wait line shows it). */
    char progress[120];
    const char *words = park_disk_progress(p, ps, progress, sizeof progress);
    json_object_set_new(e, "park_progress", words ? json_string(words) : json_null());
    /* Why it stays in host memory instead of the disk tier (disk full...). */
    if (ps && ps->disk_error[0])
        json_object_set_new(e, "disk_refused", json_string(ps->disk_error));
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
    json_object_set_new(o, "disk", park_disk_status(p));
    return o;
}

/* Bytes and sessions per tier: on the GPUs (gpu_bytes, from the GPUs'
 * memory_used), in the host pool, checkpointed, on disk. */
static json_t *tiers_status(const gs_park_t *p, json_int_t gpu_bytes, int gpu_sessions)
{
    json_int_t bytes[3] = {0, 0, 0};
    int n[3] = {0, 0, 0};
    for (const psess_t *ps = zhashx_first(p->sess); ps; ps = zhashx_next(p->sess)) {
        if (ps->st == PS_RESIDENT)
            continue;
        const char *t = tier_of(ps);
        int k = !strcmp(t, "swap") ? 0 : !strcmp(t, "checkpoint") ? 1 : 2;
        n[k]++;
        bytes[k] += (json_int_t)park_state_total_bytes(p, ps);
    }
    bytes[2] = (json_int_t)p->disk_used;
    return json_pack("{s:{s:I, s:i}, s:{s:I, s:i}, s:{s:I, s:i}, s:{s:I, s:i}}", "gpu", "bytes",
                     gpu_bytes, "sessions", gpu_sessions, "pool", "bytes", bytes[0], "sessions",
                     n[0], "checkpoint", "bytes", bytes[1], "sessions", n[1], "disk", "bytes",
                     bytes[2], "sessions", n[2]);
}

void gs_park_status_add(const gs_park_t *p, json_t *st, int64_t now)
{
    if (!p || !st)
        return;
    json_t *gpus = json_object_get(st, "gpus");
    json_int_t on_gpus = 0;
    int resident = 0;
    for (size_t i = 0; i < json_array_size(gpus) && (int)i < p->ngpus; i++) {
        json_t *g = json_array_get(gpus, i);
        json_t *sessions = json_object_get(g, "sessions");
        json_int_t used = 0;
        for (size_t k = 0; k < json_array_size(sessions); k++) {
            json_t *e = json_array_get(sessions, k);
            const char *id = json_string_value(json_object_get(e, "id"));
            if (id)
                session_status(p, id, (int)i, now, e);
            json_int_t here = json_integer_value(json_object_get(e, "resident_bytes"));
            used += here;
            resident += here > 0;
        }
        on_gpus += used;
        json_object_set_new(g, "memory_used", json_integer(used));
        gpu_status(p, (int)i, g);
    }
    json_t *parking = park_status(p);
    json_object_set_new(parking, "tiers", tiers_status(p, on_gpus, resident));
    json_object_set_new(st, "parking", parking);
    json_t *cfg = json_object_get(st, "config");
    json_t *ours = gs_park_config_json_of(p);
    if (json_is_object(cfg))
        json_object_update(cfg, ours);
    json_decref(ours);
}

int gs_park_wait_words(const gs_park_t *p, const char *session, char *out, size_t len)
{
    const psess_t *ps = p && session ? zhashx_lookup(p->sess, session) : NULL;
    if (!ps || (ps->disk != DISK_ON && ps->disk != DISK_READING))
        return 0;
    if (park_disk_progress(p, ps, out, len))
        return 1;
    uint64_t bytes = park_state_total_bytes(p, ps);
    snprintf(out, len, "coming back from disk: 0.0 of %.1f GiB", (double)bytes / (1 << 30));
    return 1;
}
