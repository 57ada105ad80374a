/*
 * park.h - memory parking in the broker: idle notebooks give their GPU
 * memory back (doc/parking.md).
 *
 * The broker parks a session by locking each of its CUDA processes and
 * checkpointing them to host memory (cuCheckpointProcess*, park_cuda.h),
 * which frees their GPU memory; it unparks by restoring and unlocking them
 * (same addresses, bit-exact).  It parks when room is needed: an
 * allocation failed (the hook's make_room), or a parked session needs the
 * GPU back (its cell started, or one of its processes asked); victims are
 * idle sessions, least recently active first, never one with a running
 * cell or a grant, never more than needed.  When only active sessions hold
 * the memory, sessions are time-sliced with a park/unpark at each switch,
 * with slices at least 10 x the switch cost.  Copies run on worker threads
 * (park_worker.h); the event loop learns their end through an eventfd.
 *
 * This module is the broker's glue: it reads the session table and the
 * scheduler, tells the scheduler where each session's memory is
 * (gs_sched_set_residency: a session that is not resident is never
 * granted), answers make_room, and reports status and events.  The
 * decisions themselves are pure functions in park_policy.h.
 */
#ifndef GS_PARK_H
#define GS_PARK_H

#include <czmq.h>
#include <jansson.h>
#include <stdint.h>

typedef struct gs_broker gs_broker_t;
typedef struct gs_park gs_park_t;

/* After the scheduler and the inventory exist.  Always returns an object
 * (NULL only without memory): without the checkpoint API parking is
 * unavailable and every make_room is answered ok:false with the reason. */
gs_park_t *gs_park_new(gs_broker_t *broker);

/* Shutdown: waits for jobs under way, then brings every parked session
 * back (restore, unlock) so that no notebook stays frozen. */
void gs_park_destroy(gs_park_t **self_p);

/* The eventfd of finished jobs (for zmq_poll), or -1 when unavailable. */
int gs_park_fd(const gs_park_t *self);

/* ---- events from the broker ---------------------------------------------- */

/* A hook joined: its credentials pid (0 unknown) and memory mode.  A
 * process left locked or checkpointed by a previous broker is brought back. */
void gs_park_on_join(gs_broker_t *b, const char *client, const char *session, long peer_pid,
                     int managed);
void gs_park_on_client_gone(gs_broker_t *b, const char *client);

/* make_room from a hook: answered now (ok:false) or when victims are
 * parked (room).  seq < 0: none. */
void gs_park_make_room(gs_broker_t *b, zframe_t *peer, const char *client, int gpu, uint64_t bytes,
                       long long seq);

/* Finished jobs (the fd was readable). */
void gs_park_on_jobs(gs_broker_t *b);

/* Look at everything again: parked sessions that need the GPU, room
 * requests, victims to park.  Called after every scheduler event
 * (gs_broker_sched_flush) and tick; returns 1 when it changed the
 * scheduler's state (flush its actions again). */
int gs_park_poll(gs_broker_t *b);

/* When gs_park_poll wants to run again by itself (INT64_MAX: never). */
int64_t gs_park_next_deadline(const gs_park_t *self);

/* ---- settings and status --------------------------------------------------- */

/* A parking key (gs_park_is_key, park_policy.h), applied. */
int gs_park_set(gs_park_t *self, const char *key, const json_t *value, char *err, size_t errlen);
/* Save/restore the settings around an all-or-nothing batch. */
void *gs_park_config_save(const gs_park_t *self);
void gs_park_config_restore(gs_park_t *self, void *saved);
json_t *gs_park_config_json_of(const gs_park_t *self);

/* Status (status.c's object): parking fields added to every session entry
 * of every GPU ("state" "parked", resident/parked bytes, counts, times,
 * "parking"), to every GPU entry (memory_used without parked memory,
 * memory_parked, ...), the top-level "parking" object and the parking
 * settings under "config". */
void gs_park_status_add(const gs_park_t *self, json_t *status);

#endif
