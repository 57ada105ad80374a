/*
 * broker_internal.h - the broker's state, shared by its dispatch files.
 */
#ifndef GS_BROKER_INTERNAL_H
#define GS_BROKER_INTERNAL_H

#include <czmq.h>
#include <jansson.h>

#include "broker.h"
#include "gpu_inventory.h"
#include "protocol.h"
#include "sessions.h"

struct gs_broker {
    gs_broker_options_t opt;
    gs_gpu_inventory_t inventory;
    zsock_t *router;
    int signal_fd;
    const char *policy;
    int scheduler_on;
    long long started_unix;
    unsigned long long next_client_id;
    unsigned long long next_grant_id;
    gs_sessions_t *sessions;
};

void gs_broker_reply(gs_broker_t *self, zframe_t *peer, json_t *msg);
void gs_broker_reply_error(gs_broker_t *self, zframe_t *peer, const json_t *req, const char *code,
                           const char *text);
void gs_broker_echo_seq(json_t *out, const json_t *req);

/* Session, cell and grant messages (session_dispatch.c).  Returns 1 when
 * the message was one of those and has been handled. */
int gs_broker_dispatch_session(gs_broker_t *self, zframe_t *peer, gs_msg_type_t type,
                               const json_t *msg);

/* Index of the GPU with this UUID, or -1. */
int gs_broker_gpu_index(const gs_broker_t *self, const char *uuid);

#endif
