/*
 * hook_client_recv.h - the broker's messages to the hook's client
 * (hook_client_recv.c).
 */
#ifndef GS_HOOK_CLIENT_RECV_H
#define GS_HOOK_CLIENT_RECV_H

#include <stddef.h>

#include "peer.h"

/* One message as received (on the I/O thread; hook_gate_mu not held). */
void hook_client_on_message(const void *data, size_t size, const gs_peer_t *peer);

#endif
