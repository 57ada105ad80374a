/*
 * wire.c - framing of protocol messages on czmq sockets (see wire.h).
 */
#include "wire.h"

#include <errno.h>
#include <stdlib.h>

int gs_wire_send(zsock_t *sock, zframe_t *identity, const json_t *msg, gs_perr_t *err)
{
    size_t size;
    char *text = gs_msg_encode(msg, &size, err);
    if (!text)
        return -1;
    zmsg_t *zm = zmsg_new();
    if (identity)
        zmsg_append(zm, &(zframe_t *){zframe_dup(identity)});
    zmsg_addmem(zm, text, size);
    free(text);
    int rc = zmsg_send(&zm, sock);
    if (rc != 0)
        zmsg_destroy(&zm);
    return rc;
}

json_t *gs_wire_recv(zsock_t *sock, zframe_t **identity, gs_msg_type_t *type, gs_perr_t *err,
                     json_t **rejected, gs_peer_t *peer)
{
    if (rejected)
        *rejected = NULL;
    err->code = GS_PERR_NONE;
    err->text[0] = '\0';
    if (identity)
        *identity = NULL;
    if (peer)
        peer->valid = 0;
    zmsg_t *zm = zmsg_recv(sock);
    if (!zm)
        return NULL;
    if (identity)
        *identity = zmsg_pop(zm);
    json_t *msg = NULL;
    zframe_t *body = zmsg_pop(zm);
    /* The credentials come from the body frame: on libzmq 4.3.4 the
     * identity frame of a prefetched message (zmq_poll and ZMQ_EVENTS
     * always prefetch) carries no metadata. */
    if (body && peer)
        gs_peer_parse(zframe_meta(body, "Peer-Address"), peer);
    if (!body || zmsg_size(zm) != 0) {
        err->code = GS_PERR_EMPTY;
        snprintf(err->text, sizeof err->text, "expected exactly one message frame");
    } else {
        msg = gs_msg_load(zframe_data(body), zframe_size(body), err);
        if (msg) {
            *type = gs_msg_validate(msg, err);
            if (*type == GS_MSG_COUNT) {
                if (rejected)
                    *rejected = msg;
                else
                    json_decref(msg);
                msg = NULL;
            }
        }
    }
    zframe_destroy(&body);
    zmsg_destroy(&zm);
    return msg;
}
