/*
 * status.c - build the status object (see status.h).
 */
#include "status.h"

#include "config.h"

#include <czmq.h>
#include <string.h>

/* The session entry of GPU gpu: its processes' pids, memory and grants. */
static json_t *session_on_gpu(gs_sessions_t *tab, const gs_session_t *s, int gpu, int *holds,
                              int *waits)
{
    json_t *pids = json_array();
    json_int_t resident = 0, grants = 0, revokes = 0;
    int used = 0;
    *holds = *waits = 0;
    for (gs_client_t *c = gs_sessions_first_client(tab); c; c = gs_sessions_next_client(tab)) {
        if (strcmp(c->session, s->id) != 0)
            continue;
        const gs_client_gpu_t *g = &c->gpu[gpu];
        json_array_append_new(pids, json_integer(c->pid));
        resident += (json_int_t)g->used_bytes;
        grants += (json_int_t)g->grants;
        revokes += (json_int_t)g->revokes;
        *holds |= g->grant_id != 0;
        *waits |= g->waiting;
        used |= g->grants != 0 || g->used_bytes != 0;
    }
    if (!used && !s->registered) {
        json_decref(pids);
        return NULL;
    }
    const char *state = *waits ? "waiting" : *holds ? "running" : "idle";
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:s, s:I, s:I, s:f, s:f, s:I, s:I}", "id",
                     s->id, "user", s->user, "kernel_id", s->kernel_id, "notebook", s->notebook,
                     "pids", pids, "state", state, "cell", s->cell_busy ? "busy" : "idle",
                     "resident_bytes", resident, "parked_bytes", (json_int_t)0, "gpu_time_s",
                     0.0, "wait_time_s", 0.0, "grants", grants, "revokes", revokes);
}

static json_t *gpu_status(const gs_status_input_t *in, int i)
{
    const gs_gpu_inventory_t *inv = in->inventory;
    const gs_gpu_t *g = &inv->gpus[i];
    json_t *holders = json_array(), *waiting = json_array(), *sessions = json_array();
    json_int_t used = 0;
    gs_sessions_t *tab = in->sessions;
    /* Collect first: session_on_gpu iterates the client table itself. */
    zlistx_t *ids = zlistx_new();
    for (gs_session_t *s = tab ? gs_sessions_first_session(tab) : NULL; s;
         s = gs_sessions_next_session(tab))
        zlistx_add_end(ids, s);
    for (gs_session_t *s = zlistx_first(ids); s; s = zlistx_next(ids)) {
        int holds, waits;
        json_t *entry = session_on_gpu(tab, s, i, &holds, &waits);
        if (!entry)
            continue;
        used += json_integer_value(json_object_get(entry, "resident_bytes"));
        if (holds)
            json_array_append_new(holders, json_string(s->id));
        if (waits)
            json_array_append_new(waiting, json_string(s->id));
        json_array_append_new(sessions, entry);
    }
    zlistx_destroy(&ids);
    return json_pack("{s:i, s:s, s:s, s:b, s:I, s:I, s:o, s:o, s:o}", "index", g->index, "uuid",
                     g->uuid, "name", g->name, "simulated", inv->simulated, "memory_total",
                     (json_int_t)g->memory_total, "memory_used", used, "holders", holders,
                     "waiting", waiting, "sessions", sessions);
}

json_t *gs_status_build(const gs_status_input_t *in)
{
    const gs_gpu_inventory_t *inv = in->inventory;
    json_t *gpus = json_array();
    for (int i = 0; i < inv->count; i++)
        json_array_append_new(gpus, gpu_status(in, i));
    json_t *st = json_pack("{s:s, s:s, s:s, s:s, s:b, s:s, s:i, s:I, s:o}", "broker_version",
                           PACKAGE_VERSION, "endpoint", in->endpoint, "policy", in->policy,
                           "scheduler", in->scheduler_on ? "on" : "off", "simulated",
                           inv->simulated, "driver", inv->driver, "driver_version",
                           inv->driver_version, "started_unix", (json_int_t)in->started_unix,
                           "gpus", gpus);
    json_object_set_new(st, "note",
                        json_string("scheduling policies are not implemented yet: every acquire "
                                    "is granted at once and the broker only monitors"));
    if (inv->count == 0)
        json_object_set_new(st, "problem", json_string(inv->problem));
    return st;
}
