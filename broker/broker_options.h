/*
 * broker_options.h - how gpushare-broker was started: what the command line
 * says (main.c), for gs_broker_new (broker.h).
 */
#ifndef GS_BROKER_OPTIONS_H
#define GS_BROKER_OPTIONS_H

#include <sys/types.h>

#include "broker_config.h"

typedef struct {
    char endpoint[256]; /* normalised ("ipc://..."); empty = default */
    int system;         /* run as the system service (/run/gpushare) */
    gid_t socket_group; /* (gid_t)-1 = none */
    int heartbeat_ms;
    char config_path[512]; /* --config; empty = GS_DEFAULT_CONFIG if it exists */
    gs_config_t overrides; /* flags (--policy, --tq, --set KEY=VALUE): win over the file */
} gs_broker_options_t;

#endif
