/*
 * status.c - build the status object (see status.h).
 */
#include "status.h"

#include "config.h"

json_t *gs_status_build(const gs_status_input_t *in)
{
    const gs_gpu_inventory_t *inv = in->inventory;
    json_t *gpus = json_array();
    for (int i = 0; i < inv->count; i++) {
        const gs_gpu_t *g = &inv->gpus[i];
        json_array_append_new(
            gpus, json_pack("{s:i, s:s, s:s, s:b, s:I, s:I, s:[], s:[], s:[]}", "index", g->index,
                            "uuid", g->uuid, "name", g->name, "simulated", inv->simulated,
                            "memory_total", (json_int_t)g->memory_total, "memory_used",
                            (json_int_t)0, "holders", "waiting", "sessions"));
    }
    json_t *st = json_pack("{s:s, s:s, s:s, s:s, s:b, s:s, s:i, s:I, s:o}", "broker_version",
                           PACKAGE_VERSION, "endpoint", in->endpoint, "policy", in->policy,
                           "scheduler", in->scheduler_on ? "on" : "off", "simulated",
                           inv->simulated, "driver", inv->driver, "driver_version",
                           inv->driver_version, "started_unix", (json_int_t)in->started_unix,
                           "gpus", gpus);
    if (inv->count == 0)
        json_object_set_new(st, "problem", json_string(inv->problem));
    return st;
}
