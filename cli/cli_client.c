/*
 * cli_client.c - request/reply over a DEALER socket with a deadline.
 *
 * Before libzmq connects (and would hide every failure behind its
 * reconnect loop and our timeout), the socket is checked and connected to
 * once (socket_trust.h): so a user outside the socket's group reads
 * "permission denied", a stale socket reads "broker not running", and a
 * socket someone else could have put there is not used.  The welcome's
 * credentials must be root's, the user's or the service account's.
 */
#include "cli_client.h"

#include <czmq.h>
#include <stdio.h>
#include <unistd.h>

#include "endpoint.h"
#include "socket_trust.h"
#include "wire.h"

static json_t *call(gs_cli_client_t *self, json_t *request, gs_peer_t *peer, char *err,
                    size_t errlen);

struct gs_cli_client {
    zsock_t *sock;
    int timeout_ms;
    long long seq;
    char endpoint[256];
};

gs_cli_client_t *gs_cli_client_connect(const char *endpoint, int timeout_ms, char *err,
                                       size_t errlen)
{
    gs_cli_client_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->timeout_ms = timeout_ms;
    char note[600];
    int rc = endpoint ? gs_endpoint_normalise(endpoint, self->endpoint, sizeof self->endpoint, err,
                                              errlen)
                      : gs_endpoint_for_client(self->endpoint, sizeof self->endpoint, note,
                                               sizeof note, err, errlen);
    if (rc != 0)
        goto fail;
    if (!endpoint && note[0])
        fprintf(stderr, "gpushare: warning: %s\n", note);
    const char *path = gs_endpoint_ipc_path(self->endpoint);
    if (path && gs_trust_probe(path, gs_endpoint_is_user_socket(path), err, errlen) != GS_PROBE_OK)
        goto fail;
    zsys_handler_set(NULL);
    self->sock = zsock_new(ZMQ_DEALER);
    if (!self->sock) {
        snprintf(err, errlen, "cannot create a ZeroMQ socket");
        goto fail;
    }
    zsock_set_linger(self->sock, 0);
    zsock_set_maxmsgsize(self->sock, GS_PROTO_MAX_SIZE); /* a larger frame drops the link */
    zsock_set_rcvtimeo(self->sock, timeout_ms);
    zsock_set_sndtimeo(self->sock, timeout_ms);
    if (zsock_connect(self->sock, "%s", self->endpoint) < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", self->endpoint,
                 zmq_strerror(zmq_errno()));
        goto fail;
    }
    json_t *hello = gs_msg_new(GS_MSG_HELLO);
    json_object_set_new(hello, "role", json_string("cli"));
    json_object_set_new(hello, "pid", json_integer(getpid()));
    gs_peer_t peer;
    json_t *welcome = call(self, hello, &peer, err, errlen);
    if (!welcome)
        goto fail;
    int ok = strcmp(gs_msg_str(welcome, "type", ""), "welcome") == 0;
    if (!ok)
        snprintf(err, errlen, "broker at %s refused hello: %s", self->endpoint,
                 gs_msg_str(welcome, "message", "no reason given"));
    else if (gs_trust_peer(&peer, self->endpoint, err, errlen) != 0)
        ok = 0;
    json_decref(welcome);
    if (!ok)
        goto fail;
    return self;
fail:
    gs_cli_client_destroy(&self);
    return NULL;
}

/* Send request, wait for its reply; peer (may be NULL) receives the
 * credentials the reply came with. */
static json_t *call(gs_cli_client_t *self, json_t *request, gs_peer_t *peer, char *err,
                    size_t errlen)
{
    long long seq = ++self->seq;
    json_object_set_new(request, "seq", json_integer(seq));
    gs_perr_t perr;
    int rc = gs_wire_send(self->sock, NULL, request, &perr);
    json_decref(request);
    if (rc != 0) {
        snprintf(err, errlen, "cannot send to %s: %s", self->endpoint,
                 perr.code ? perr.text : zmq_strerror(zmq_errno()));
        return NULL;
    }
    for (;;) {
        gs_msg_type_t type;
        json_t *reply = gs_wire_recv(self->sock, NULL, &type, &perr, NULL, peer);
        if (!reply) {
            if (perr.code != GS_PERR_NONE)
                snprintf(err, errlen, "broker sent a malformed reply: %s", perr.text);
            else
                snprintf(err, errlen, "no reply from the broker at %s within %d ms", self->endpoint,
                         self->timeout_ms);
            return NULL;
        }
        if (gs_msg_int(reply, "seq", -1) == seq)
            return reply;
        json_decref(reply); /* a stale reply to an earlier, timed-out call */
    }
}

json_t *gs_cli_client_call(gs_cli_client_t *self, json_t *request, char *err, size_t errlen)
{
    return call(self, request, NULL, err, errlen);
}

const char *gs_cli_client_endpoint(const gs_cli_client_t *self)
{
    return self->endpoint;
}

void gs_cli_client_destroy(gs_cli_client_t **self_p)
{
    gs_cli_client_t *self = *self_p;
    if (!self)
        return;
    zsock_destroy(&self->sock);
    free(self);
    *self_p = NULL;
}
