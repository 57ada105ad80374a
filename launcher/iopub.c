/*
 * iopub.c - IOPub message to cell event (see iopub.h).
 */
#include "iopub.h"

#include <jansson.h>
#include <string.h>

#define DELIM "<IDS|MSG>"
/* A status message's frames are small; a header above this is no status. */
#define HEADER_MAX (64 * 1024)

static json_t *load(const void *data, size_t size)
{
    if (size == 0 || size > HEADER_MAX)
        return NULL;
    json_t *v = json_loadb(data, size, 0, NULL);
    if (v && !json_is_object(v)) {
        json_decref(v);
        return NULL;
    }
    return v;
}

static const char *str(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "";
}

gs_iopub_event_t gs_iopub_classify(const gs_iopub_auth_t *auth, const void *const frames[],
                                   const size_t sizes[], size_t nframes, char *msg_id)
{
    size_t d = 0;
    while (d < nframes && !(sizes[d] == strlen(DELIM) && !memcmp(frames[d], DELIM, sizes[d])))
        d++;
    /* delimiter, signature, header, parent_header, metadata, content */
    if (d == nframes || nframes - d < 6)
        return GS_IOPUB_MALFORMED;
    const void *const *body = frames + d + 2;
    const size_t *bsizes = sizes + d + 2;
    /* Cheap filter first: outputs are most of the traffic and can be big. */
    json_t *header = load(body[0], bsizes[0]);
    if (!header)
        return GS_IOPUB_MALFORMED;
    int is_status = strcmp(str(header, "msg_type"), "status") == 0;
    json_decref(header);
    if (!is_status)
        return GS_IOPUB_IGNORE;
    if (!gs_hmac_verify(auth->scheme, auth->key, auth->key_len, body, bsizes, 4, frames[d + 1],
                        sizes[d + 1]))
        return GS_IOPUB_BAD_SIGNATURE;
    json_t *parent = load(body[1], bsizes[1]);
    json_t *content = load(body[3], bsizes[3]);
    gs_iopub_event_t ev = GS_IOPUB_MALFORMED;
    if (parent && content) {
        const char *state = str(content, "execution_state");
        const char *id = str(parent, "msg_id");
        ev = GS_IOPUB_IGNORE;
        if (strcmp(str(parent, "msg_type"), "execute_request") == 0 && *id &&
            strlen(id) < GS_IOPUB_MSG_ID_MAX) {
            if (strcmp(state, "busy") == 0)
                ev = GS_IOPUB_CELL_BUSY;
            else if (strcmp(state, "idle") == 0)
                ev = GS_IOPUB_CELL_IDLE;
            if (ev != GS_IOPUB_IGNORE)
                memcpy(msg_id, id, strlen(id) + 1);
        }
    }
    json_decref(parent);
    json_decref(content);
    return ev;
}
