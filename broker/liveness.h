/*
 * liveness.h - which clients are dead: ZeroMQ disconnect events (read by
 * conn_guard.h, which watches the connections, and passed on), heartbeats
 * (a client silent for 3 heartbeat intervals is dead) and whether the
 * peer's process still exists (checked every heartbeat interval and right
 * after each disconnect, so a killed process' grant is reclaimed within
 * ~150 ms).
 *
 * The same checks find registered sessions whose launcher, or every
 * process, is gone (gs_liveness_find_orphans).
 *
 * It only finds them; the broker's loop drops them (settle.h).
 */
#ifndef GS_LIVENESS_H
#define GS_LIVENESS_H

#include <stddef.h>
#include <stdint.h>

#include "sessions.h"

typedef struct gs_liveness gs_liveness_t;

/* A dead client: its key in the session table, why it is dead, and
 * whether its process is gone (1: it cannot join again, what it left
 * parked is nobody's; 0: only silent). */
typedef struct {
    char key[64];
    const char *why;
    int exited;
} gs_liveness_dead_t;

/* Clients send a heartbeat every heartbeat_ms.  NULL with err set when out
 * of memory. */
gs_liveness_t *gs_liveness_new(int heartbeat_ms, int64_t now, char *err, size_t errlen);
void gs_liveness_destroy(gs_liveness_t **self_p);

/* A connection to the broker ended (a ZeroMQ disconnect event): check
 * every client now and a few times soon. */
void gs_liveness_on_disconnect(gs_liveness_t *self, int64_t now);

/* 1 when the clients are to be checked now: soon after a disconnect, or
 * every heartbeat interval (then *check_silence is 1: silent clients are
 * dead too). */
int gs_liveness_due(gs_liveness_t *self, int64_t now, int *check_silence);

/* Up to max dead clients of sessions into dead; returns how many.  Dropping
 * them changes the table: drop them, then ask again while it returns max. */
int gs_liveness_find_dead(const gs_liveness_t *self, gs_sessions_t *sessions, int64_t now,
                          int check_silence, gs_liveness_dead_t *dead, int max);

/* A registered session whose launcher (the process that registered it)
 * is gone: ended, when no process of it is left (its kernel nor any
 * hook); else only its cells are no longer reported. */
typedef struct {
    char id[GS_SESSION_ID_MAX];
    int ended;
    char why[160];
} gs_liveness_orphan_t;

/* Up to max such sessions into out (each launcher found gone is reported
 * once; the caller sets registrar_gone or ends the session); returns how
 * many.  Call after the dead clients were dropped, at the same moments,
 * and again while it returns max. */
int gs_liveness_find_orphans(const gs_liveness_t *self, gs_sessions_t *sessions,
                             gs_liveness_orphan_t *out, int max);

/* When gs_liveness_due next says yes (INT64_MAX: never). */
int64_t gs_liveness_next_deadline(const gs_liveness_t *self);

#endif
