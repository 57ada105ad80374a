/*
 * eventlog.h - the broker's JSON-lines event log for offline analysis:
 * registrations, cells, grants, revokes, releases, parks, deaths.
 *
 * One object per line: {"ts": <unix seconds, µs precision>, "event": "...",
 * ...fields}.  Appended with one write(2) each; reopened on SIGHUP so that
 * logrotate can move it.
 */
#ifndef GS_EVENTLOG_H
#define GS_EVENTLOG_H

#include <jansson.h>

typedef struct gs_eventlog gs_eventlog_t;

/* Open (append, create 0640) path; NULL with err set on failure. */
gs_eventlog_t *gs_eventlog_open(const char *path, char *err, size_t errlen);

/* Reopen the same path (after rotation).  Returns 0 or -1. */
int gs_eventlog_reopen(gs_eventlog_t *self);

/* Write event with fields (consumed; may be NULL).  NULL self is a no-op,
 * so callers need not check whether logging is on. */
void gs_eventlog_write(gs_eventlog_t *self, const char *event, json_t *fields);

const char *gs_eventlog_path(const gs_eventlog_t *self);

void gs_eventlog_close(gs_eventlog_t **self_p);

#endif
