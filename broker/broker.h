/*
 * broker.h - the gpushare broker: one ROUTER socket, one event loop.
 *
 * Like Redis, the broker is single-threaded: every state change happens on
 * the loop thread in response to a message, a timer or a signal, so the
 * scheduler needs no locks and can be driven by a virtual clock in tests.
 * So broker/ and broker/sched/ have no mutexes, no `_locked` functions and
 * nothing for GS_ASSERT_HELD (gs_assert.h) to check: the only threads are
 * parking's workers (park/park_worker.c), whose locks are park's own.
 */
#ifndef GS_BROKER_H
#define GS_BROKER_H

#include <stddef.h>

#include "broker_options.h"

typedef struct gs_broker gs_broker_t;

/* Load the GPU inventory, prepare and bind the socket.  NULL with a message
 * in err when it cannot listen. */
gs_broker_t *gs_broker_new(const gs_broker_options_t *opt, char *err, size_t errlen);

/* Serve until SIGTERM or SIGINT; returns the exit status. */
int gs_broker_run(gs_broker_t *self);

void gs_broker_destroy(gs_broker_t **self_p);

#endif
