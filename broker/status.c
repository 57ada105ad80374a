/*
 * status.c - build the status object (see status.h).
 */
#include "status.h"

#include "config.h"

#include <czmq.h>
#include <string.h>

static const char *const state_names[] = {"idle", "running", "waiting"};

/* The session entry of GPU gpu: its processes, memory, grants and times;
 * NULL when the session never used that GPU and is not a notebook. */
static json_t *session_on_gpu(const gs_status_input_t *in, const gs_session_t *s, int gpu)
{
    gs_sched_info_t si;
    int placed[GS_PLACE_MAX_GPUS], nplaced = 0, here = 0;
    if (in->placements)
        nplaced = gs_placement_get(in->placements, s->id, placed, GS_PLACE_MAX_GPUS);
    for (int i = 0; i < nplaced; i++)
        here |= placed[i] == gpu;
    /* A notebook is shown on every GPU it may use: the ones it was placed
     * on, or all of them (no placement); any session where it did use one. */
    int used = gs_sched_session_used_gpu(in->sched, s->id, gpu);
    if (gs_sched_info(in->sched, s->id, gpu, in->now_us, &si) != 0 ||
        (!used && !(s->registered && (!nplaced || here))))
        return NULL;
    /* Placed elsewhere now (moved, park_move.c) and nothing of it here. */
    if (nplaced && !here && !si.resident_bytes && si.state == GS_SESS_IDLE)
        return NULL;
    json_t *pids = json_array();
    gs_sessions_t *tab = in->sessions;
    for (gs_client_t *c = gs_sessions_first_client(tab); c; c = gs_sessions_next_client(tab))
        if (strcmp(c->session, s->id) == 0)
            json_array_append_new(pids, json_integer(c->pid));
    json_t *e = json_pack(
        "{s:s, s:s, s:s, s:s, s:o, s:s, s:s, s:I, s:I, s:f, s:f, s:I, s:I}", "id", s->id, "user",
        s->user, "kernel_id", s->kernel_id, "notebook", s->notebook, "pids", pids, "state",
        state_names[si.state], "cell", s->cell_busy ? "busy" : "idle", "resident_bytes",
        (json_int_t)si.resident_bytes, "parked_bytes", (json_int_t)0, "gpu_time_s",
        (double)si.gpu_time_us / 1e6, "wait_time_s", (double)si.wait_time_us / 1e6, "grants",
        (json_int_t)si.grants, "revokes", (json_int_t)si.revokes);
    /* user is the owner's account (socket credentials); what a launcher
     * claimed is shown beside it when it differs. */
    /* A notebook's kernel (registered by its launcher or the provisioner)
     * or a program that joined by itself (`gpushare run`, a script). */
    json_object_set_new(e, "kind", json_string(s->registered ? "notebook" : "program"));
    /* What its owner calls it; the id is NAME@UID for a session of a user
     * other than the broker's (sessions.h), so that two users' sessions of
     * one name are two. */
    json_object_set_new(e, "name", json_string(s->name));
    if (nplaced) /* the broker chose this GPU for it (placement) */
        json_object_set_new(e, "placed", json_boolean(here));
    if (gs_sched_gang(in->sched, s->id)) /* holds its GPUs together (scheduler_gang.c) */
        json_object_set_new(e, "gang", json_true());
    if (s->owner_known)
        json_object_set_new(e, "uid", json_integer((json_int_t)s->owner_uid));
    if (s->claimed[0])
        json_object_set_new(e, "claimed_user", json_string(s->claimed));
    json_object_set_new(e, "quantum_s", json_real((double)si.quantum_us / 1e6));
    /* Since its last cell, grant or release: what the deep tier goes by. */
    json_object_set_new(e, "idle_s", json_real((double)(in->now_us - si.last_active_us) / 1e6));
    json_object_set_new(e, "boosted", json_boolean(si.boosted));
    /* What switching it costs and what that allows (doc/scheduling.md). */
    json_object_set_new(e, "switch_cost_s", json_real((double)si.switch_cost_us / 1e6));
    json_object_set_new(
        e, "turn_left_s",
        json_real(si.turn_end_us > in->now_us ? (double)(si.turn_end_us - in->now_us) / 1e6 : 0.0));
    json_object_set_new(e, "idle_gap_s", json_real((double)si.idle_gap_us / 1e6));
    json_object_set_new(e, "think_gap_s", json_real((double)si.think_gap_us / 1e6));
    json_object_set_new(e, "share",
                        json_pack("{s:f, s:f, s:f}", "request", si.request, "limit", si.limit,
                                  "used", si.share_used));
    return e;
}

static json_t *gpu_status(const gs_status_input_t *in, int i)
{
    const gs_gpu_inventory_t *inv = in->inventory;
    const gs_gpu_t *g = &inv->gpus[i];
    json_t *sessions = json_array();
    json_int_t used = 0;
    gs_sessions_t *tab = in->sessions;
    /* Collect first: session_on_gpu iterates the client table itself. */
    zlistx_t *list = zlistx_new();
    for (gs_session_t *s = tab ? gs_sessions_first_session(tab) : NULL; s;
         s = gs_sessions_next_session(tab))
        zlistx_add_end(list, s);
    for (gs_session_t *s = zlistx_first(list); s; s = zlistx_next(list)) {
        json_t *entry = session_on_gpu(in, s, i);
        if (!entry)
            continue;
        used += json_integer_value(json_object_get(entry, "resident_bytes"));
        json_array_append_new(sessions, entry);
    }
    zlistx_destroy(&list);
    return json_pack("{s:i, s:s, s:s, s:b, s:I, s:I, s:o, s:o, s:o}", "index", g->index, "uuid",
                     g->uuid, "name", g->name, "simulated", inv->simulated, "memory_total",
                     (json_int_t)g->memory_total, "memory_used", used, "holders",
                     gs_sched_holders_json(in->sched, i), "waiting",
                     gs_sched_waiting_json(in->sched, i), "sessions", sessions);
}

json_t *gs_status_build(const gs_status_input_t *in)
{
    const gs_gpu_inventory_t *inv = in->inventory;
    json_t *gpus = json_array();
    for (int i = 0; i < inv->count; i++)
        json_array_append_new(gpus, gpu_status(in, i));
    const gs_sched_config_t *cfg = gs_sched_config(in->sched);
    json_t *st = json_pack(
        "{s:s, s:s, s:s, s:s, s:b, s:s, s:i, s:I, s:o, s:o}", "broker_version", PACKAGE_VERSION,
        "endpoint", in->endpoint, "policy", gs_sched_policy_name(cfg->policy), "scheduler",
        cfg->enabled ? "on" : "off", "simulated", inv->simulated, "driver", inv->driver,
        "driver_version", inv->driver_version, "started_unix", (json_int_t)in->started_unix,
        "config", gs_sched_config_json(in->sched), "gpus", gpus);
    if (inv->count == 0)
        json_object_set_new(st, "problem", json_string(inv->problem));
    return st;
}

void gs_status_anonymize(json_t *st, uid_t viewer)
{
    size_t i, k;
    json_t *gpu, *e;
    json_array_foreach(json_object_get(st, "gpus"), i, gpu)
    {
        json_array_foreach(json_object_get(gpu, "sessions"), k, e)
        {
            json_t *uid = json_object_get(e, "uid");
            if (json_is_integer(uid) && (uid_t)json_integer_value(uid) == viewer)
                continue;
            json_object_set_new(e, "user", json_string(""));
            json_object_set_new(e, "notebook", json_string(""));
            json_object_set_new(e, "kernel_id", json_string(""));
            json_object_set_new(e, "pids", json_array());
            json_object_del(e, "uid");
            /* its id would name the uid (NAME@UID): its name stands in */
            json_t *name = json_object_get(e, "name");
            if (json_is_string(name))
                json_object_set(e, "id", name);
            json_object_del(e, "claimed_user");
            json_object_set_new(e, "anonymous", json_true());
        }
    }
}
