/*
 * status.h - the broker's state as the JSON object `gpushare status --json`
 * prints (fields documented in doc/protocol.md under status_reply).
 */
#ifndef GS_STATUS_H
#define GS_STATUS_H

#include <jansson.h>
#include <sys/types.h>
#include "gpu_inventory.h"
#include "placement.h"
#include "sched/scheduler.h"
#include "sessions.h"

typedef struct {
    const gs_sched_t *sched; /* grants, accounting, settings */
    int64_t now_us;          /* the scheduler's clock, for times up to now */
    const char *endpoint;
    const gs_gpu_inventory_t *inventory;
    long long started_unix;
    gs_sessions_t *sessions;
    const gs_placement_t *placements; /* which GPUs sessions were placed on; NULL: none */
} gs_status_input_t;

/* The status object (`gpushare status --json`) built from in.  Returns a
 * new reference; the caller decrefs it (or hands it on with a _new
 * setter); NULL only when out of memory. */
json_t *gs_status_build(const gs_status_input_t *in);

/* show_others = anonymous, for a viewer who is no admin: the sessions of
 * other users (or of no known owner) in st lose what names them (user,
 * uid, claimed_user, notebook, kernel_id, pids) and get "anonymous": true. */
void gs_status_anonymize(json_t *st, uid_t viewer);

#endif
