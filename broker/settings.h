/*
 * settings.h - one path for every setting, whether it comes from the
 * configuration file (at start and on SIGHUP), the state file of
 * `gpushare set --persist`, a command-line flag or `gpushare set`.
 */
#ifndef GS_SETTINGS_H
#define GS_SETTINGS_H

#include <jansson.h>
#include <stddef.h>

#include "broker_config.h"
#include "broker_state.h"
#include "state_file.h"

/* Apply a batch, all or nothing: the scheduler's and parking's keys,
 * then the daemon's own.  persist_path: `set --persist` saves the batch
 * there (state_file.h) before anything takes effect, and a batch that
 * cannot be saved changes nothing.  The broker then settles (settle.h).
 * 0; -1 with the first bad setting in err (FILE:LINE: first when it
 * names its file); -2 when the batch was good but could not be saved. */
int gs_settings_apply(gs_broker_t *b, const setting_t *settings, size_t n, const char *persist_path,
                      char *err, size_t errlen);

/* The configuration file, then the state file (runtime keys only: what
 * `set` may change), then the command line's flags, as one batch: later
 * sources win.  skip_start_only: leave out the keys read only at start (a
 * reload).  Any of them may be NULL. */
int gs_settings_apply_files(gs_broker_t *b, const gs_config_t *file, const gs_config_t *state,
                            const gs_config_t *flags, int skip_start_only, char *err,
                            size_t errlen);

/* 1 for the keys gs_broker_new reads once, before the socket is bound. */
int gs_settings_is_start_only(const char *key);

/* SIGHUP: re-read the configuration file and the state file; on an error
 * keep the running configuration. */
int gs_settings_reload(gs_broker_t *b);

#endif
