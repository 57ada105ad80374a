/*
 * hook_client_room.h - make_room requests inside the broker client
 * (hook_client_room.c); hook_client_make_room in hook_client.h waits for
 * one.
 */
#ifndef GS_HOOK_CLIENT_ROOM_H
#define GS_HOOK_CLIENT_ROOM_H

#include <jansson.h>

/* hook_gate_mu held: every request waiting for an answer fails with why. */
void hook_client_rooms_fail_locked(const char *why);
/* hook_gate_mu held: a make_room message for each request not sent yet,
 * at most max, stored in out (the caller owns them); returns how many. */
int hook_client_rooms_ask_locked(json_t **out, int max);
/* hook_gate_mu held: unanswered requests (every one, or those of request
 * seq) are sent again with the next round. */
void hook_client_rooms_reask_locked(int every, long long seq);
/* The broker answered request seq (reason: NULL for none). */
void hook_client_room_answered(long long seq, int ok, const char *reason);
/* A `room` message: an answer, or why the request still waits. */
void hook_client_room_on_reply(const json_t *m);

#endif
