/*
 * cli_status.h - `gpushare status`: the broker's state for people and scripts.
 */
#ifndef GS_CLI_STATUS_H
#define GS_CLI_STATUS_H

#include <jansson.h>
#include <stdio.h>

/* What a session entry is, for the NOTEBOOK column: the notebook's path,
 * "(program)" for a program outside Jupyter, else "". */
const char *gs_cli_status_what(const json_t *session);

/* Print a status object as a person reads it. */
void gs_cli_status_print(FILE *out, const json_t *status);

/* The broker's status object (caller decrefs), or NULL with err set. */
json_t *gs_cli_status_fetch(const char *endpoint, int timeout_ms, char *err, size_t errlen);

/* Run `gpushare status [--json]`; returns the exit status. */
int gs_cli_status_main(int argc, char **argv, const char *endpoint);

#endif
