/*
 * metrics.h - Prometheus metrics over HTTP (off by default: metrics_port =
 * 0), served by libmicrohttpd from the broker's own event loop.
 *
 * GET (or HEAD) /metrics answers the text exposition of the same status
 * object `gpushare status` prints; anything else is 404 or 405.  HTTP
 * itself (request parsing, keep-alive, limits, timeouts) is
 * libmicrohttpd's; this module only binds the socket and renders the text.
 */
#ifndef GS_METRICS_H
#define GS_METRICS_H

#include <jansson.h>
#include <stddef.h>

typedef struct gs_metrics gs_metrics_t;

/* Builds the current status object (a new reference); called on the
 * loop's thread, from gs_metrics_run. */
typedef json_t *(*gs_metrics_status_fn)(void *arg);

/* Listen on address:port (address "127.0.0.1" by default; IPv4 or IPv6)
 * and answer from status_fn(arg).  NULL with err set when it cannot. */
gs_metrics_t *gs_metrics_new(const char *address, int port, gs_metrics_status_fn status_fn,
                             void *arg, char *err, size_t errlen);
void gs_metrics_destroy(gs_metrics_t **self_p);

/* The port actually bound (port 0 asks the kernel for one). */
int gs_metrics_port(const gs_metrics_t *self);

/* The one descriptor to poll for reading next to the loop's others. */
int gs_metrics_fd(const gs_metrics_t *self);

/* How long the loop may wait before gs_metrics_run is due even with no
 * event on the descriptor (connections' timeouts, data already read):
 * milliseconds, -1 for no limit. */
long gs_metrics_timeout_ms(const gs_metrics_t *self);

/* Serve whatever is ready, without blocking. */
void gs_metrics_run(gs_metrics_t *self);

/* The Prometheus text exposition of a status object (malloc'd). */
char *gs_metrics_render(const json_t *status);

#endif
