/*
 * reply.h - answers to the client whose request the broker is handling,
 * on the ROUTER socket.
 */
#ifndef GS_REPLY_H
#define GS_REPLY_H

#include <czmq.h>
#include <jansson.h>

/* Send msg (consumed) to peer.  A message that breaks the protocol is not
 * sent but logged: it is the broker's bug, not the client's. */
void gs_reply_send(zsock_t *router, zframe_t *peer, json_t *msg);

/* An `error` reply with code and text, echoing req's seq. */
void gs_reply_error(zsock_t *router, zframe_t *peer, const json_t *req, const char *code,
                    const char *text);

/* Copy req's seq (when it has one) into out, so the client can match them. */
void gs_reply_echo_seq(json_t *out, const json_t *req);

#endif
