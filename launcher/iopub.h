/*
 * iopub.h - turn one IOPub message of a Jupyter kernel into a cell event.
 *
 * A cell starts when the kernel publishes status "busy" whose parent is an
 * execute_request, and ends with status "idle" for the same parent; the
 * parent's msg_id pairs the two.  Every other message (output, busy/idle of
 * kernel_info or completion requests, "starting") is none of the broker's
 * business.  Only messages with a valid signature count (hmac.h).
 *
 * Wire format (Jupyter messaging spec): [topic...] "<IDS|MSG>" signature
 * header parent_header metadata content [buffers...].  This is a pure
 * function over the frames so that the unit tests need no sockets; the
 * header is parsed before the signature is checked only to skip the bulk
 * of the traffic (outputs) cheaply, and nothing is acted on before the
 * signature has been verified.
 */
#ifndef GS_IOPUB_H
#define GS_IOPUB_H

#include <stddef.h>

#include "hmac.h"

typedef enum {
    GS_IOPUB_IGNORE = 0,    /* valid, but not a cell boundary */
    GS_IOPUB_CELL_BUSY,     /* an execute_request started: msg_id filled */
    GS_IOPUB_CELL_IDLE,     /* an execute_request finished: msg_id filled */
    GS_IOPUB_BAD_SIGNATURE, /* a status message whose signature is wrong */
    GS_IOPUB_MALFORMED      /* no delimiter, missing frames, bad JSON */
} gs_iopub_event_t;

typedef struct {
    gs_hmac_scheme_t scheme;
    const unsigned char *key;
    size_t key_len;
} gs_iopub_auth_t;

#define GS_IOPUB_MSG_ID_MAX 256

/* Classify the message made of nframes frames.  On CELL_BUSY / CELL_IDLE,
 * msg_id (GS_IOPUB_MSG_ID_MAX bytes) receives the parent's msg_id. */
gs_iopub_event_t gs_iopub_classify(const gs_iopub_auth_t *auth, const void *const frames[],
                                   const size_t sizes[], size_t nframes, char *msg_id);

#endif
