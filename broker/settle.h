/*
 * settle.h - what follows an event, carried out before the loop waits
 * again: the scheduler's grants and revokes become messages, parking looks
 * at the change (it may park, unpark or answer make_room, which makes more
 * actions), and a client found gone leaves the tables.
 *
 * Every handler of the broker ends here, so a decision reaches the hooks in
 * the same turn of the loop as the message that caused it (the hand-off
 * after a release is one loop turn).
 */
#ifndef GS_SETTLE_H
#define GS_SETTLE_H

#include "broker_state.h"

/* Send the scheduler's pending grants and revokes and let parking act on
 * them, until nothing changes; call after every scheduler event or tick. */
void gs_settle(gs_broker_t *b);

/* Send the answers parking has ready (make_room's `room`). */
void gs_settle_answers(gs_broker_t *b);

/* How a client went: it said it exits, or the broker dropped it (dead,
 * silent, disconnected, joining again), whose process may live on. */
typedef enum { GS_GONE_EXITED, GS_GONE_DROPPED } gs_gone_t;

/* A client is gone: its grants and memory go back to the scheduler at
 * once (parking keeps the memory of a dropped process that lives on in its
 * estimate), it leaves the tables, and the broker settles. */
void gs_settle_client_gone(gs_broker_t *b, const char *key, gs_gone_t how, const char *why);

/* Drop the broker's record of session id when no launcher registered it and
 * the scheduler has forgotten it. */
void gs_settle_forget_session(gs_broker_t *b, const char *id);

/* A registered session is over (unregistered, or no process of it is
 * left): it is no longer registered, its cell is over, the scheduler
 * revokes its grants, and the broker settles. */
void gs_settle_end_session(gs_broker_t *b, const char *id);

/* The launcher that reported session id's cells is gone while processes
 * of the session live on: no cell boundary will come, so a busy cell is
 * over (the session is scheduled like a program outside Jupyter). */
void gs_settle_launcher_gone(gs_broker_t *b, const char *id, const char *why);

#endif
