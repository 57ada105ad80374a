/*
 * status_fetch.h - the broker's status object, asked for over a short-lived
 * connection, and how a session entry is named; shared by `gpushare
 * status` and `gpushare top` (neither needs the other for it).
 */
#ifndef GS_STATUS_FETCH_H
#define GS_STATUS_FETCH_H

#include <jansson.h>

/* The broker's status object (caller decrefs), or NULL with err set. */
json_t *gs_cli_status_fetch(const char *endpoint, int timeout_ms, char *err, size_t errlen);

/* Replaces the control characters of every string in v (text_safe.h), in
 * place: what the broker sends may hold other users' text. */
void gs_cli_json_make_safe(json_t *v);

/* What its owner calls a session (its name; the id of a session of a user
 * other than the broker's is NAME@UID), for the SESSION column. */
const char *gs_cli_status_name(const json_t *session);

/* What a session entry is, for the NOTEBOOK column: the notebook's path,
 * "(program)" for a program outside Jupyter, else "". */
const char *gs_cli_status_what(const json_t *session);

#endif
