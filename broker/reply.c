/*
 * reply.c - see reply.h.
 */
#include "reply.h"

#include "log.h"
#include "protocol.h"
#include "wire.h"

void gs_reply_send(zsock_t *router, zframe_t *peer, json_t *msg)
{
    gs_perr_t err;
    if (gs_wire_send(router, peer, msg, &err) != 0 && err.code != GS_PERR_NONE)
        gs_error("internal: reply breaks the protocol: %s", err.text);
    json_decref(msg);
}

void gs_reply_error(zsock_t *router, zframe_t *peer, const json_t *req, const char *code,
                    const char *text)
{
    gs_reply_send(router, peer, gs_msg_error_reply(req, code, text));
}

void gs_reply_echo_seq(json_t *out, const json_t *req)
{
    json_t *seq = json_object_get(req, "seq");
    if (json_is_integer(seq))
        json_object_set(out, "seq", seq);
}
