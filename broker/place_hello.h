/*
 * place_hello.h - the answer to a hook's hello that asks where its session
 * runs (placement.h, issue 18), as the broker's state sees it: which
 * session (the sender's own of that name), which GPUs, and what a hello
 * may leave behind (issue 34, item 5).
 */
#ifndef GS_PLACE_HELLO_H
#define GS_PLACE_HELLO_H

#include <jansson.h>

#include "broker_state.h"

/* Pending placements one uid may hold: sessions placed by its hellos
 * that no process of it has joined (nor a launcher registered) yet. */
#define GS_PLACE_PENDING_PER_UID 64
/* How long a pending placement outlives the process that asked (its
 * session's next process gets the same answer meanwhile). */
#define GS_PLACE_PENDING_HOLD_US (10 * 60 * 1000000LL)

/* The GPUs the process of `hello` (from the sender in b->peer) is to see,
 * as a JSON array of UUIDs, or NULL: placement is off, the server has one
 * GPU, the process is not of a session, the sender has no credentials, or
 * its spawner chose (CUDA_VISIBLE_DEVICES: respected, and said).  A
 * session's later processes get its first one's answer. */
json_t *gs_place_hello(gs_broker_t *b, const json_t *hello);

#endif
