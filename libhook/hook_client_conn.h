/*
 * hook_client_conn.h - the broker client's connection states
 * (hook_client_conn.c); on the I/O thread, hook_gate_mu not held.
 */
#ifndef GS_HOOK_CLIENT_CONN_H
#define GS_HOOK_CLIENT_CONN_H

#include <jansson.h>
#include <stdint.h>

#include "peer.h"

/* Closes the socket and its monitor; not ready. */
void hook_client_close_socket(void);
/* No broker (or one to fail open for): ungated, warned once, tried again
 * in retry_in_ms. */
void hook_client_go_ungated(const char *why, uint64_t retry_in_ms);
/* A broker that answers refused this process: gated, nothing granted,
 * said once, asked again in retry_in_ms. */
void hook_client_go_refused(const char *why, uint64_t retry_in_ms);
/* A fresh socket to the endpoint, checked first, and its hello. */
void hook_client_open_socket(void);
void hook_client_send_heartbeat(void);
/* The broker no longer knows this process, or may not: fence and join
 * again (why: logged). */
void hook_client_rejoin(const char *why);
/* Fences and joins again when this process was silent for longer than
 * the broker waits. */
void hook_client_check_stall(uint64_t now);
void hook_client_on_welcome(const json_t *m, const gs_peer_t *peer);

#endif
