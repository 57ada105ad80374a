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
 * The swap tier (park_swap.c) parks a session whose hooks can swap by
 * asking them (swap_out / swap_in) to move their memory into host memory
 * lent from the GPU's pool (swap_pools.h), which the hooks map through the
 * pool socket beside the broker's endpoint (pool_socket.h); the checkpoint
 * API parks the rest.
 *
 * This module is the broker's glue: it reads the session table and the
 * scheduler, tells the scheduler where each session's memory is
 * (gs_sched_set_residency: a session that is not resident is never
 * granted), answers make_room, and reports status and events.  The
 * decisions themselves are pure functions in sched/park_policy.h.
 *
 * It knows nothing of the broker around it: it is made from the objects it
 * reads and acts on, is told the time with every event, and never sends a
 * message.  Its messages to clients (make_room's `room`, the swap tier's
 * swap_out and swap_in) wait in a queue for the broker to send
 * (gs_park_next_answer), and it says when it changed the scheduler's state
 * (gs_park_poll's result), so that the broker sends the scheduler's
 * actions again.
 */
#ifndef GS_PARK_H
#define GS_PARK_H

#include <czmq.h>
#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "eventlog.h"
#include "gpu_inventory.h"
#include "park_backend.h"
#include "park_move_hooks.h"
#include "sched/park_policy.h"
#include "sched/scheduler.h"
#include "sessions.h"

typedef struct gs_park gs_park_t;

/* The swap tier's poll items, at most (gs_park_poll_items): the pinning
 * thread's eventfd, the pool socket and its connections. */
#define GS_PARK_MAX_POLL_ITEMS 67

/* Parking for the GPUs of gpus, acting on sched and reading the sessions of
 * sessions (both must outlive it).  endpoint is the broker's (ipc://PATH):
 * the swap tier's pool socket goes beside it, with the same access as the
 * broker's socket (sock_mode, and sock_group unless it is (gid_t)-1:
 * gs_socket_mode); NULL or a tcp endpoint: no swap tier.  Always returns an object (NULL only
 * without memory): without the checkpoint API parking is unavailable and every make_room is
 * answered ok:false with the reason. */
gs_park_t *gs_park_new(gs_sched_t *sched, gs_sessions_t *sessions, const gs_gpu_inventory_t *gpus,
                       const char *endpoint, mode_t sock_mode, gid_t sock_group);

/* Shutdown: waits for jobs under way, then brings every parked session
 * back (restore, unlock) so that no notebook stays frozen. */
void gs_park_destroy(gs_park_t **self_p);

/* The same with the checkpoint API and its worker threads given as a table
 * (copied; its destroy is called by gs_park_destroy): a unit test plays
 * them on a virtual clock.  NULL: the driver's, as gs_park_new. */
gs_park_t *gs_park_new_with(gs_sched_t *sched, gs_sessions_t *sessions,
                            const gs_gpu_inventory_t *gpus, const char *endpoint, mode_t sock_mode,
                            gid_t sock_group, const gs_park_backend_t *backend);

/* The broker's say in moving a parked session to another GPU (park_move.c,
 * park_move_hooks.h); copied. */
void gs_park_set_move_hooks(gs_park_t *self, const gs_park_move_hooks_t *hooks);

/* Where parking writes its events (NULL: nowhere).  The broker's event log
 * changes with its settings, so it says so each time. */
void gs_park_set_eventlog(gs_park_t *self, gs_eventlog_t *eventlog);

/* The eventfd of finished jobs (for zmq_poll), or -1 when unavailable. */
int gs_park_fd(const gs_park_t *self);

/* The swap tier's own items to poll (its pinning thread's eventfd, the
 * pool socket and its connections); how many (at most
 * GS_PARK_MAX_POLL_ITEMS). */
int gs_park_poll_items(gs_park_t *self, zmq_pollitem_t *items, int max);
/* After zmq_poll, for those items.  A pool that grew may let a park start:
 * the broker settles (gs_park_poll) afterwards. */
void gs_park_handle_items(gs_park_t *self, const zmq_pollitem_t *items, int n, int64_t now);

/* ---- events from the broker (now: CLOCK_MONOTONIC in µs) ------------------- */

/* A hook joined: its credentials pid (0 unknown) and uid (-1 unknown), its
 * memory mode, whether it can swap (the swap tier) and the segment it
 * moves memory in (0 unknown: a hook older than `swap_segment_bytes`,
 * which moved 1 GiB segments).  A process left locked or checkpointed by
 * a previous broker is brought back. */
void gs_park_on_join(gs_park_t *self, const char *client, const char *session, long peer_pid,
                     long peer_uid, int managed, int swap, uint64_t swap_segment, int64_t now);
/* A hook's memory report: what it holds on GPU gpu, how much of that it
 * can swap out itself, and how much is out in host memory now. */
void gs_park_on_memory(gs_park_t *self, const char *client, int gpu, uint64_t used,
                       uint64_t movable, uint64_t swapped, uint64_t peak, int64_t now);
/* A hook's answer to swap_out / swap_in (a `swapped` message). */
void gs_park_on_swapped(gs_park_t *self, const char *client, int gpu, const json_t *msg,
                        int64_t now);
/* A client is gone.  exited: it said so, its memory goes with it; else a
 * process that lives on (stopped, its connection closed) keeps what it
 * holds, on the GPU and in host memory, until it joins again or dies. */
void gs_park_on_client_gone(gs_park_t *self, const char *client, int exited, int64_t now);

/* make_room from a hook of session: answered now (ok:false, returns 0) or,
 * when it returns 1, once gs_park_poll has parked victims (room); either
 * way the answer comes from gs_park_next_answer.  seq < 0: none.
 * timeout_ms: how long the hook waits (0: a hook that does not say, 30 s);
 * while memory held elsewhere may still become free (busy or just idle
 * sessions, a full host), the request waits up to then and the hook is
 * told why (room with waiting: true). */
int gs_park_make_room(gs_park_t *self, zframe_t *peer, const char *session, int gpu, uint64_t bytes,
                      long long seq, long long timeout_ms, int64_t now);

/* `park` (%gpushare release): park session now, without waiting for
 * park_idle_s or a need for room, once it is idle (no running cell, grant
 * or acquire).  0 with what happens in info (also "nothing to park" when
 * it holds no GPU memory or is parked already), or -1 with why it cannot
 * be parked. */
int gs_park_request(gs_park_t *self, const char *session, int64_t now, char *info, size_t len);

/* Finished jobs (the fd was readable).  The scheduler's state changed: the
 * broker sends its actions and polls again. */
void gs_park_on_jobs(gs_park_t *self, int64_t now);

/* Look at everything again: parked sessions that need the GPU, room
 * requests, victims to park.  Called after every scheduler event and tick;
 * returns 1 when it changed the scheduler's state (send its actions and
 * poll again). */
int gs_park_poll(gs_park_t *self, int64_t now);

/* When gs_park_poll wants to run again by itself (INT64_MAX: never). */
int64_t gs_park_next_deadline(const gs_park_t *self);

/* The next message for a client (`room`, `swap_out` or `swap_in`, a new
 * reference) with its routing id in *peer (the caller destroys both), or
 * NULL when none waits. */
json_t *gs_park_next_answer(gs_park_t *self, zframe_t **peer);

/* ---- settings and status --------------------------------------------------- */

/* A parking key (gs_park_policy_is_key, sched/park_policy.h), applied. */
int gs_park_set(gs_park_t *self, const char *key, const json_t *value, char *err, size_t errlen);
/* Save/restore the settings around an all-or-nothing batch: a copy of them
 * (malloc'd, NULL without memory), which the caller owns: it frees it
 * (free) once the batch is committed, or hands it to gs_park_config_restore,
 * which puts the settings back and frees it (NULL: nothing to put back). */
gs_park_config_t *gs_park_config_save(const gs_park_t *self);
void gs_park_config_restore(gs_park_t *self, gs_park_config_t *saved);
/* The settings for status and `get` (a new object: the caller owns it). */
json_t *gs_park_config_json_of(const gs_park_t *self);

/* Status (status.c's object): parking fields added to every session entry
 * of every GPU ("state" "parked", resident/parked bytes, counts, times,
 * "parking"), to every GPU entry (memory_used without parked memory,
 * memory_parked, ...), the top-level "parking" object and the parking
 * settings under "config". */
void gs_park_status_add(const gs_park_t *self, json_t *status, int64_t now);
/* Why session's memory keeps its cell waiting, in words, when parking is
 * the reason ("coming back from disk: 6.1 of 24.0 GiB"): 1 with out set,
 * else 0. */
int gs_park_wait_words(const gs_park_t *self, const char *session, char *out, size_t len);

#endif
