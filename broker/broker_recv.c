/*
 * broker_recv.c - receive one request on the ROUTER together with the
 * sender's credentials.
 *
 * gs_wire_recv (common/wire.c) hands back only the identity frame, and on
 * libzmq 4.3.4 the identity frame of a message that was prefetched (which
 * zmq_poll and ZMQ_EVENTS always do) carries no metadata: only the body
 * frame has the "Peer-Address" property with the ipc peer's uid:gid:pid.
 * So the broker receives here: the same framing and validation as
 * gs_wire_recv, plus the credentials of the body frame in self->peer.
 */
#include "broker_state.h"

json_t *gs_broker_recv(gs_broker_t *self, zframe_t **identity, gs_msg_type_t *type, gs_perr_t *err,
                       json_t **rejected)
{
    *rejected = NULL;
    *identity = NULL;
    err->code = GS_PERR_NONE;
    err->text[0] = '\0';
    self->peer.valid = 0;
    zmsg_t *zm = zmsg_recv(self->router);
    if (!zm)
        return NULL;
    *identity = zmsg_pop(zm);
    json_t *msg = NULL;
    zframe_t *body = zmsg_pop(zm);
    if (body)
        gs_peer_parse(zframe_meta(body, "Peer-Address"), &self->peer);
    if (!body || zmsg_size(zm) != 0) {
        err->code = GS_PERR_EMPTY;
        snprintf(err->text, sizeof err->text, "expected exactly one message frame");
    } else {
        msg = gs_msg_load(zframe_data(body), zframe_size(body), err);
        if (msg) {
            *type = gs_msg_validate(msg, err);
            if (*type == GS_MSG_COUNT) {
                *rejected = msg;
                msg = NULL;
            }
        }
    }
    zframe_destroy(&body);
    zmsg_destroy(&zm);
    return msg;
}
