/*
 * settings.h - one path for every setting, whether it comes from the
 * configuration file (at start and on SIGHUP), a command-line flag or
 * `gpushare set`.
 */
#ifndef GS_SETTINGS_H
#define GS_SETTINGS_H

#include <jansson.h>
#include <stddef.h>

#include "broker_config.h"
#include "broker_state.h"

/* Apply a {key: value} batch from `set` (from_set: only run-time keys) or
 * a reload; scheduling and parking keys all-or-nothing.  The broker then
 * settles (settle.h).  0, or -1 with the first problem in err. */
int gs_settings_apply(gs_broker_t *b, const json_t *settings, int from_set, char *err,
                      size_t errlen);

/* Apply a configuration file's entries one by one (errors name FILE:LINE). */
int gs_settings_apply_config(gs_broker_t *b, const gs_config_t *cfg, char *err, size_t errlen);

/* SIGHUP: re-read the configuration file; on error keep the running one. */
int gs_settings_reload(gs_broker_t *b);

#endif
