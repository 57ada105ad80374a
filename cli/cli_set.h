/*
 * cli_set.h - `gpushare set KEY=VALUE...`: change the broker's policy,
 * quantum, boost and shares at run time (root or the admin group only).
 */
#ifndef GS_CLI_SET_H
#define GS_CLI_SET_H

int gs_cli_set_main(int argc, char **argv, const char *endpoint);

#endif
