/*
 * cli_top.h - `gpushare top`: a live view of the broker in the terminal,
 * like top or nvtop: a block per GPU, a line per session.
 */
#ifndef GS_CLI_TOP_H
#define GS_CLI_TOP_H

/* Runs until q, Ctrl-C, SIGTERM or SIGHUP (or one frame with --once);
 * returns the exit status. */
int gs_cli_top_main(int argc, char **argv, const char *endpoint);

#endif
