/*
 * hook_wait.h - what the program waits for, kept per device for whoever
 * shows it: the notebook's wait line (gpushare_hook_wait_state(), read by
 * the gpushare IPython extension) and the hook's own notice on stderr.
 *
 * A device's wait runs from the moment one thread starts waiting there (at
 * the gate for a grant or for its memory to come back, or in an allocation
 * for the broker to make room) until no thread waits any more; each one
 * that ended adds to the device's totals.  Everything is guarded by
 * hook_gate_mu, like the rest of the device table.
 */
#ifndef GS_HOOK_WAIT_H
#define GS_HOOK_WAIT_H

#include <stdatomic.h>

#include "hook_gate.h"

/* A thread starts or stops waiting at d's gate (hook_gate_mu held). */
void hook_wait_gate_enter_locked(struct hook_dev *d);
void hook_wait_gate_leave_locked(struct hook_dev *d);
/* An allocation of `bytes` on d starts or stops waiting for room. */
void hook_wait_room_enter_locked(struct hook_dev *d, uint64_t bytes);
void hook_wait_room_leave_locked(struct hook_dev *d);

/* Nonzero: someone else shows the waits (the notebook's wait line), so the
 * hook prints no notice of its own on stderr. */
extern atomic_int hook_wait_quiet;
/* Sets it; returns the previous value.  A forked child (a data loader's
 * worker, a subprocess before its exec) starts with notices on again: the
 * notebook's line shows only the kernel's own waits.  (Its own atfork
 * handler: the hook's may not be registered yet, before any CUDA call.) */
int hook_wait_set_quiet(int quiet);

#endif
