/*
 * hook_drain.h - giving a GPU back: wait for the work this process
 * submitted to it, then report that the grant may go back.
 */
#ifndef GS_HOOK_DRAIN_H
#define GS_HOOK_DRAIN_H

#include "hook_gate.h"

/* How a finished drain says that d's grant goes back (reason "idle" or
 * "revoked"); called with hook_gate_mu held.  The broker client sets it
 * before it can start a drain. */
typedef void (*hook_drain_report_fn)(struct hook_dev *d, const char *reason);
void hook_drain_set_report(hook_drain_report_fn fn);

/* Closes the gate of dev and starts draining it (hook_gate_mu held); kick:
 * hand the drain to the helper thread now (else the caller runs
 * hook_drain_now_or_later). */
void hook_drain_start_locked(int dev, enum hook_drain_reason why, int kick);
/* hook_gate_mu not held: drains dev at once if the GPU is idle, else
 * leaves it to the helper thread. */
void hook_drain_now_or_later(int dev);
/* New work arrived for d: an idle release under way is called off and the
 * grant kept.  1 when it was. */
int hook_drain_cancel_idle_locked(struct hook_dev *d);
void hook_drain_atfork_child(void);

#endif
