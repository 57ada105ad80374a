/*
 * status_fetch.c - see status_fetch.h.
 */
#include "status_fetch.h"

#include <stdio.h>
#include <string.h>

#include "cli_client.h"
#include "protocol.h"

json_t *gs_cli_status_fetch(const char *endpoint, int timeout_ms, char *err, size_t errlen)
{
    gs_cli_client_t *client = gs_cli_client_connect(endpoint, timeout_ms, err, errlen);
    if (!client)
        return NULL;
    json_t *reply = gs_cli_client_call(client, gs_msg_new(GS_MSG_STATUS), err, errlen);
    gs_cli_client_destroy(&client);
    if (!reply)
        return NULL;
    json_t *st = json_object_get(reply, "status");
    if (!json_is_object(st)) {
        snprintf(err, errlen, "broker refused: %s",
                 gs_msg_str(reply, "message", "no reason given"));
        st = NULL;
    } else {
        json_incref(st);
    }
    json_decref(reply);
    return st;
}

const char *gs_cli_status_what(const json_t *session)
{
    const char *nb = gs_msg_str(session, "notebook", "");
    if (!*nb && strcmp(gs_msg_str(session, "kind", ""), "program") == 0)
        return "(program)";
    return nb;
}
