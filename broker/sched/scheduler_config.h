/*
 * scheduler_config.h - the scheduler's settings (part of its public API,
 * included by scheduler.h): defaults, a whole configuration checked and
 * installed, one setting by name, the shares, and the settings as JSON.
 */
#ifndef GS_SCHEDULER_CONFIG_H
#define GS_SCHEDULER_CONFIG_H

#include <jansson.h>
#include <stddef.h>

#include "scheduler_types.h"

void gs_sched_config_default(gs_sched_config_t *cfg);

/* Check and install a whole configuration.  Returns 0, or -1 with a
 * sentence naming the bad setting in err (nothing changed).  The new
 * settings take effect at the next gs_sched_tick (the deadline becomes
 * "now"): holders beyond what the policy allows are revoked ("policy"). */
int gs_sched_set_config(gs_sched_t *self, const gs_sched_config_t *cfg, char *err, size_t errlen);
const gs_sched_config_t *gs_sched_config(const gs_sched_t *self);

/* One setting by name, as `gpushare set`, the configuration file and
 * signals give them.  Keys (and the JSON values accepted):
 *   scheduler "on"|"off" (or true/false)   policy "exclusive"|"burst"|"adaptive"
 *   tq (or tq_s) seconds > 0               boost_ms >= 0
 *   alpha, beta in [0, 1]                  quota_min_ms, quota_max_ms, quota_base_ms > 0
 *   window_s > 0                           adaptive_min_s, adaptive_max_s > 0
 *   headroom in [0, 0.9] (fraction of each GPU's memory)
 *   request, limit in [0, 1] (defaults for every session)
 *   share.<session>.request, share.<session>.limit in [0, 1]
 *     (the session need not exist yet; kept until it is changed; a
 *     default request above a session's own limit counts as that limit)
 * Returns 0, or -1 with err set ("tq: must be a number of seconds > 0, not
 * \"x\"").  Same timing as gs_sched_set_config. */
int gs_sched_set(gs_sched_t *self, const char *key, const json_t *value, char *err, size_t errlen);

/* The shares (share.<session>.*), which live outside gs_sched_config_t, as
 * they are now: a batch of settings that is refused puts them back with
 * gs_sched_shares_restore (which frees saved) along with the configuration.
 * NULL when out of memory; restoring NULL changes nothing. */
void *gs_sched_shares_save(const gs_sched_t *self);
void gs_sched_shares_restore(gs_sched_t *self, void *saved);

/* The current settings as an object whose keys gs_sched_set accepts back:
 * {"scheduler":"on","policy":"adaptive","tq_s":20.0,"boost_ms":500,...,
 *  "shares":{"<session>":{"request":0.5,"limit":1.0}}}. New reference. */
json_t *gs_sched_config_json(const gs_sched_t *self);

const char *gs_sched_policy_name(gs_sched_policy_t policy);
int gs_sched_policy_parse(const char *name, gs_sched_policy_t *out);

#endif
