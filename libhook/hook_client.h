/*
 * hook_client.h - the broker client: the I/O thread that owns the one
 * connection to gpushare-broker.
 */
#ifndef GS_HOOK_CLIENT_H
#define GS_HOOK_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "hook_gate.h"

/* A context for device dev exists: the device is gated from now on, and
 * the I/O thread starts if it has not (hook_init done). */
void hook_client_touch(int dev);
/* Wakes the I/O thread (acquires to send, releases queued, a footprint
 * changed). */
void hook_client_kick(void);
/* Queues a release of d's grant (hook_gate_mu held). */
void hook_client_release_locked(struct hook_dev *d, const char *reason);
void hook_client_stop(void); /* at exit: releases, bounded wait */
/* Asks the broker to make room for `bytes` on dev and waits at most
 * timeout_ms for its answer (hook_gate_mu not held by the caller, nor
 * while waiting).  1: room made, retry; 0: refused (reason filled), timed
 * out or no broker. */
int hook_client_make_room(int dev, uint64_t bytes, unsigned timeout_ms, char *reason,
                          size_t reason_len);
/* The broker's socket path (hook_fork.c closes the child's copies). */
const char *hook_client_ipc_path(void);
void hook_client_atfork_child(void);

#endif
