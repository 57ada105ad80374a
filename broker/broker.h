/*
 * broker.h - the gpushare broker: one ROUTER socket, one event loop.
 *
 * Like Redis, the broker is single-threaded: every state change happens on
 * the loop thread in response to a message, a timer or a signal, so the
 * scheduler needs no locks and can be driven by a virtual clock in tests.
 */
#ifndef GS_BROKER_H
#define GS_BROKER_H

#include <stddef.h>
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

typedef struct gs_broker gs_broker_t;

/* Load the GPU inventory, prepare and bind the socket.  NULL with a message
 * in err when it cannot listen. */
gs_broker_t *gs_broker_new(const gs_broker_options_t *opt, char *err, size_t errlen);

/* Serve until SIGTERM or SIGINT; returns the exit status. */
int gs_broker_run(gs_broker_t *self);

void gs_broker_destroy(gs_broker_t **self_p);

#endif
