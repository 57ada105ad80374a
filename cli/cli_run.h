/*
 * cli_run.h - `gpushare run [--name NAME] -- COMMAND [ARGS...]`: any program
 * (a script, a terminal, an IDE's process) under the hook, as a session of
 * its own.
 */
#ifndef GS_CLI_RUN_H
#define GS_CLI_RUN_H

/* Execs COMMAND; returns only on an error (the exit status: 2 for bad
 * usage, 126/127 when COMMAND cannot be run). */
int gs_cli_run_main(int argc, char **argv, const char *endpoint);

#endif
