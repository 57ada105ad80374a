/*
 * cli_status.h - `gpushare status`: the broker's state for people and scripts.
 */
#ifndef GS_CLI_STATUS_H
#define GS_CLI_STATUS_H

#include <jansson.h>
#include <stdio.h>

/* Print a status object as a person reads it. */
void gs_cli_status_print(FILE *out, const json_t *status);

/* Run `gpushare status [--json]`; returns the exit status. */
int gs_cli_status_main(int argc, char **argv, const char *endpoint);

#endif
