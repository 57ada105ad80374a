/*
 * hook_client_send.c - the bottom of the broker client (hook_client.c):
 * its shared state, the clock it counts in, waking its I/O thread, and the
 * messages every layer above sends (any, a join, a release queued for the
 * I/O thread).  It calls nothing of the client's other files.
 */
#define _GNU_SOURCE
#include "hook_client.h"
#include "hook_client_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zmq.h>

#include "endpoint.h"
#include "gs_assert.h"
#include "hook_clock.h"
#include "hook_config.h"
#include "hook_swap.h"
#include "log.h"

struct hook_client_shared hook_client_sh = {.efd = -1};
struct hook_client_io_state hook_client_io;

uint64_t hook_client_now_ms(void)
{
    return hook_clock_ns() / 1000000ULL;
}

const char *hook_client_ipc_path(void)
{
    return hook_client_sh.endpoint[0] ? gs_endpoint_ipc_path(hook_client_sh.endpoint) : NULL;
}

void hook_client_kick(void)
{
    int fd = hook_client_sh.efd;
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(fd, &one, sizeof one);
        (void)w;
    }
}

/* ---- messages ----------------------------------------------------------- */

void hook_client_send(json_t *m)
{
    if (!m)
        return;
    gs_perr_t err;
    size_t len;
    char *buf = gs_msg_encode(m, &len, &err);
    if (!buf)
        gs_error("internal: cannot encode a message: %s", err.text);
    else {
        if (gs_log_enabled(GS_LOG_DEBUG))
            gs_debug("-> %s", buf);
        if (hook_client_io.sock && zmq_send(hook_client_io.sock, buf, len, ZMQ_DONTWAIT) < 0)
            gs_debug("send failed: %s", zmq_strerror(errno));
        else if (hook_client_io.sock)
            hook_client_io.last_sent =
                hook_client_now_ms(); /* the broker's silence clock starts again */
        free(buf);
    }
    json_decref(m);
}

json_t *hook_client_msg_seq(gs_msg_type_t type)
{
    json_t *m = gs_msg_new(type);
    if (m)
        json_object_set_new(m, "seq", json_integer(++hook_client_io.seq));
    return m;
}

void hook_client_send_join(void)
{
    json_t *m = hook_client_msg_seq(GS_MSG_JOIN);
    if (!m)
        return;
    hook_client_io.join_seq = hook_client_io.seq;
    json_object_set_new(m, "pid", json_integer(getpid()));
    if (hook_cfg.session[0] && !hook_client_io.join_without_session)
        json_object_set_new(m, "session", json_string(hook_cfg.session));
    json_t *devs = json_array();
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < hook_gate_st.ndev && i < GS_PROTO_MAX_ITEMS; i++)
        json_array_append_new(devs, json_string(hook_gate_st.dev[i].uuid));
    pthread_mutex_unlock(&hook_gate_mu);
    json_object_set_new(m, "devices", devs);
    json_object_set_new(m, "memory_mode", json_string(hook_cfg.managed ? "managed" : "device"));
    if (!hook_cfg.managed && hook_swap_available()) {
        json_object_set_new(m, "swap", json_true());
        json_object_set_new(m, "swap_segment_bytes",
                            json_integer((json_int_t)hook_swap_segment_bytes()));
    }
    if (hook_gate_gang) /* a broker restarted since the placement learns it here */
        json_object_set_new(m, "gang", json_true());
    hook_client_send(m);
}

/* hook_gate_mu held.  Queued; sent by the I/O thread when connected, dropped
 * when not (a new broker knows nothing of old grants). */
void hook_client_release_locked(struct hook_dev *d, const char *reason)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    if (!hook_client_sh.connected || d->grant_id < 1 || hook_client_sh.nreleases >= MAX_RELEASES)
        return;
    json_t *m = gs_msg_new(GS_MSG_RELEASE);
    if (!m)
        return;
    uint64_t used_us = (hook_clock_ns() - d->granted_ns) / 1000ULL;
    json_object_set_new(m, "device", json_string(d->uuid));
    json_object_set_new(m, "grant_id", json_integer(d->grant_id));
    json_object_set_new(m, "reason", json_string(reason));
    json_object_set_new(m, "used_us", json_integer((json_int_t)used_us));
    uint64_t q = d->quantum_us > 0 ? (uint64_t)d->quantum_us : 0;
    json_object_set_new(m, "overuse_us",
                        json_integer(q && used_us > q ? (json_int_t)(used_us - q) : 0));
    hook_client_sh.releases[hook_client_sh.nreleases++] = m;
}
