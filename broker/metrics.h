/*
 * metrics.h - Prometheus metrics over HTTP on a localhost port (off by
 * default: metrics_port = 0).
 *
 * A deliberately tiny HTTP/1.0 server inside the broker's event loop: it
 * serves GET /metrics from the same status object `gpushare status`
 * prints, never blocks the loop (non-blocking sockets, a few connections,
 * bounded requests), and closes each connection after one answer.
 */
#ifndef GS_METRICS_H
#define GS_METRICS_H

#include <jansson.h>
#include <stddef.h>
#include <zmq.h>

typedef struct gs_metrics gs_metrics_t;

/* Listen on address:port (address "127.0.0.1" by default).  NULL with err
 * set when it cannot. */
gs_metrics_t *gs_metrics_new(const char *address, int port, char *err, size_t errlen);
void gs_metrics_destroy(gs_metrics_t **self_p);

/* The port actually bound (port 0 asks the kernel for one). */
int gs_metrics_port(const gs_metrics_t *self);

/* Add this server's sockets to a zmq_poll set; returns how many were added
 * (at most max). */
int gs_metrics_poll_items(gs_metrics_t *self, zmq_pollitem_t *items, int max);

/* After zmq_poll: serve whatever is ready among items[0..n).  status_fn
 * builds the current status object (new reference) on demand. */
void gs_metrics_handle(gs_metrics_t *self, const zmq_pollitem_t *items, int n,
                       json_t *(*status_fn)(void *), void *arg);

/* The Prometheus text exposition of a status object (malloc'd). */
char *gs_metrics_render(const json_t *status);

#endif
