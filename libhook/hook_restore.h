/*
 * hook_restore.h - gpushare-restore, started for this process when the
 * broker is lost.
 *
 * A process the broker parked on the checkpoint tier (locked and
 * checkpointed with the driver's checkpoint API) cannot bring itself back:
 * its CUDA calls block inside the locked driver.  When a broker dies with
 * it parked, only another process can restore it, so the I/O thread
 * starts the helper (libhook/restore/) for its own pid whenever it loses a
 * broker it was connected to; the helper finds the process running and
 * exits, or restores and unlocks it, waiting for GPU memory if need be.
 * When a broker is back, the helper is stopped (SIGTERM): the new broker
 * adopts what is still parked (park_adopted).
 *
 * All of it runs on the I/O thread (never in a CUDA call), which also
 * reaps the helper, so no zombie stays.  The helper is found at
 * GPUSHARE_RESTORE_HELPER, else where it is installed; a missing one is
 * said once, and the hook goes on without it (fail open).
 */
#ifndef GS_HOOK_RESTORE_H
#define GS_HOOK_RESTORE_H

/* The broker was lost after a welcome: start the helper (unless one
 * runs). */
void hook_restore_broker_lost(void);
/* A broker welcomed this process, or the process exits: stop the
 * helper. */
void hook_restore_stop(void);
/* Each round of the I/O thread: reap a helper that ended. */
void hook_restore_reap(void);
/* In a forked child: the parent's helper is not the child's. */
void hook_restore_atfork_child(void);

#endif
