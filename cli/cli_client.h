/*
 * cli_client.h - a short-lived client of the broker for the gpushare tool.
 */
#ifndef GS_CLI_CLIENT_H
#define GS_CLI_CLIENT_H

#include <jansson.h>
#include <stddef.h>

typedef struct gs_cli_client gs_cli_client_t;

/* Connect to endpoint (NULL: the default rule of endpoint.h) and say hello.
 * NULL with a message in err when no broker answers within timeout_ms. */
gs_cli_client_t *gs_cli_client_connect(const char *endpoint, int timeout_ms, char *err,
                                       size_t errlen);

/* Send request (consumed) and wait for the reply with the same seq.
 * Returns the reply (caller decrefs), or NULL with err set.  An "error"
 * reply is returned as such: callers check its type. */
json_t *gs_cli_client_call(gs_cli_client_t *self, json_t *request, char *err, size_t errlen);

const char *gs_cli_client_endpoint(const gs_cli_client_t *self);

void gs_cli_client_destroy(gs_cli_client_t **self_p);

#endif
