/*
 * state_file.h - where `gpushare set --persist` keeps settings across
 * restarts.
 *
 * A `key = value` file like the configuration file, but written by the
 * broker, never by hand in the first place: the administrator's
 * configuration file is only ever read.  The broker reads it at start and
 * on SIGHUP after the configuration file, so its values win over the
 * file's (and command-line flags over both); it may hold only what `set`
 * may change.  The system service keeps it in /var/lib/gpushare (the
 * unit's StateDirectory: /etc is read-only to it); a per-user broker has
 * one only when `state_file` names it, so that brokers started by tests or
 * by hand never share one by accident.  Plain `set` changes stay runtime
 * only, and say so.
 */
#ifndef GS_STATE_FILE_H
#define GS_STATE_FILE_H

#include <jansson.h>
#include <stddef.h>

#include "broker_config.h"

#define GS_SYSTEM_STATE_FILE "/var/lib/gpushare/broker.state"

/* One setting of a batch (settings.h), wherever it comes from. */
typedef struct {
    const char *key;
    json_t *value;    /* borrowed */
    const char *path; /* the file it came from, for errors; NULL: `set` */
    int line;         /* > 0: its line there */
    int runtime_only; /* `set` or the state file: only keys `set` may change */
} setting_t;

/* Read path (a missing file is an empty one).  0, or -1 with err set. */
int gs_state_file_load(const char *path, gs_config_t *out, char *err, size_t errlen);

/* Merge the batch into path (its keys replace theirs, the others stay)
 * and replace the file atomically.  0, or -1 with err set; the file is then
 * as it was. */
int gs_state_file_save(const char *path, const setting_t *settings, size_t n, char *err,
                       size_t errlen);

#endif
