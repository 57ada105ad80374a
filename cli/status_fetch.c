/*
 * status_fetch.c - see status_fetch.h.
 */
#include "status_fetch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_client.h"
#include "protocol.h"
#include "text_safe.h"

void gs_cli_json_make_safe(json_t *v)
{
    if (json_is_string(v)) {
        const char *text = json_string_value(v);
        if (gs_text_is_safe(text))
            return;
        size_t size = strlen(text) + 1; /* each replacement is no longer than what it replaces */
        char *clean = malloc(size);
        if (!clean)
            return;
        gs_text_safe(clean, size, text);
        json_string_set(v, clean);
        free(clean);
    } else if (json_is_object(v)) {
        const char *key;
        json_t *item;
        json_object_foreach(v, key, item) gs_cli_json_make_safe(item);
    } else if (json_is_array(v)) {
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item) gs_cli_json_make_safe(item);
    }
}

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
        /* Names and paths come from other users' messages: no control
         * character reaches a terminal from here, whatever the broker let
         * through (text_safe.h). */
        gs_cli_json_make_safe(st);
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

const char *gs_cli_status_name(const json_t *session)
{
    const char *name = gs_msg_str(session, "name", "");
    return *name ? name : gs_msg_str(session, "id", "?");
}
