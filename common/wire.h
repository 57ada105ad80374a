/*
 * wire.h - one protocol message per ZeroMQ frame over czmq sockets.
 *
 * ROUTER sockets (the broker) carry an identity frame first; DEALER sockets
 * (clients) carry just the message.  Receiving never blocks longer than the
 * socket's own timeout and never trusts the frame (see protocol.h).
 */
#ifndef GS_WIRE_H
#define GS_WIRE_H

#include <czmq.h>
#include "peer.h"
#include "protocol.h"

/* Encode and send msg (not consumed).  identity is the ROUTER peer frame or
 * NULL on a DEALER.  Returns 0, or -1 with *err set (schema) or errno set. */
int gs_wire_send(zsock_t *sock, zframe_t *identity, const json_t *msg, gs_perr_t *err);

/* Receive one message.  On a ROUTER, *identity receives the peer frame
 * (caller destroys), otherwise pass NULL.  Returns a validated message, or
 * NULL: *err.code is GS_PERR_NONE when nothing arrived (timeout/interrupt),
 * else says why the frame was rejected.  When the frame was a JSON object
 * that failed validation and rejected is non-NULL, *rejected receives it
 * (caller decrefs) so an error reply can echo its seq and type.  When peer
 * is non-NULL it receives the sender's credentials from an ipc connection
 * (peer.h; valid = 0 without them), rejected messages included. */
json_t *gs_wire_recv(zsock_t *sock, zframe_t **identity, gs_msg_type_t *type, gs_perr_t *err,
                     json_t **rejected, gs_peer_t *peer);

#endif
