/*
 * revoke_latency.c - how long libgpushare-hook.so takes from a broker's
 * revoke to its release, on an otherwise idle GPU.
 *
 * This program stands in for the broker (same protocol, same socket type):
 * it grants every acquire at once, and a fixed gap after each grant sends
 * revoke and times the release.  Run a program that touches the GPU every
 * few milliseconds under the hook with GPUSHARE_BROKER pointing here and
 * GPUSHARE_IDLE_RELEASE_MS=0 (so the hook never releases on its own).
 *   revoke_latency ENDPOINT SAMPLES [GAP_MS]   -> one JSON line on stdout
 */
#include <czmq.h>
#include <stdlib.h>

#include "protocol.h"
#include "wire.h"

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static void send_msg(zsock_t *router, zframe_t *peer, json_t *msg, const json_t *req)
{
    json_t *seq = req ? json_object_get(req, "seq") : NULL;
    if (json_is_integer(seq))
        json_object_set(msg, "seq", seq);
    gs_perr_t err;
    gs_wire_send(router, peer, msg, &err);
    json_decref(msg);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: revoke_latency ENDPOINT SAMPLES [GAP_MS]\n");
        return 2;
    }
    int samples = atoi(argv[2]), gap_ms = argc > 3 ? atoi(argv[3]) : 5;
    if (samples <= 0 || gap_ms < 0) {
        fprintf(stderr, "revoke_latency: SAMPLES must be > 0 and GAP_MS >= 0\n");
        return 2;
    }
    zsys_handler_set(NULL);
    zsock_t *router = zsock_new(ZMQ_ROUTER);
    if (zsock_bind(router, "%s", argv[1]) < 0) {
        fprintf(stderr, "revoke_latency: cannot bind %s\n", argv[1]);
        return 1;
    }
    long long *lat = calloc((size_t)samples, sizeof *lat);
    int n = 0;
    long long grant_id = 0, revoke_at = 0, granted_at = 0;
    char device[64] = "";
    zframe_t *holder = NULL;
    while (n < samples) {
        int timeout = -1;
        if (holder && !revoke_at) {
            long long due = granted_at + gap_ms * 1000LL - zclock_usecs();
            timeout = due > 0 ? (int)(due / 1000) + 1 : 0;
        }
        zmq_pollitem_t item = {zsock_resolve(router), 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, timeout) < 0)
            break;
        if (!(item.revents & ZMQ_POLLIN)) {
            json_t *r = gs_msg_new(GS_MSG_REVOKE);
            json_object_set_new(r, "device", json_string(device));
            json_object_set_new(r, "grant_id", json_integer(grant_id));
            json_object_set_new(r, "reason", json_string("quantum"));
            revoke_at = zclock_usecs();
            send_msg(router, holder, r, NULL);
            continue;
        }
        zframe_t *peer;
        gs_msg_type_t type;
        gs_perr_t err;
        json_t *m = gs_wire_recv(router, &peer, &type, &err, NULL, NULL);
        if (!m) {
            zframe_destroy(&peer);
            continue;
        }
        long long now = zclock_usecs();
        if (type == GS_MSG_HELLO) {
            json_t *w = gs_msg_new(GS_MSG_WELCOME);
            json_object_set_new(w, "client_id", json_string("bench"));
            json_object_set_new(w, "broker_version", json_string("bench"));
            json_object_set_new(w, "policy", json_string("exclusive"));
            json_object_set_new(w, "scheduler", json_string("on"));
            json_object_set_new(w, "heartbeat_ms", json_integer(1000));
            json_object_set_new(w, "simulated", json_false());
            send_msg(router, peer, w, m);
        } else if (type == GS_MSG_JOIN) {
            json_t *ok = gs_msg_new(GS_MSG_OK);
            json_object_set_new(ok, "session", json_string("bench"));
            send_msg(router, peer, ok, m);
        } else if (type == GS_MSG_ACQUIRE) {
            snprintf(device, sizeof device, "%s", gs_msg_str(m, "device", ""));
            json_t *g = gs_msg_new(GS_MSG_GRANT);
            json_object_set_new(g, "device", json_string(device));
            json_object_set_new(g, "grant_id", json_integer(++grant_id));
            json_object_set_new(g, "quantum_us", json_integer(0));
            send_msg(router, peer, g, m);
            zframe_destroy(&holder);
            holder = zframe_dup(peer);
            granted_at = now;
            revoke_at = 0;
        } else if (type == GS_MSG_RELEASE && revoke_at &&
                   gs_msg_int(m, "grant_id", 0) == grant_id) {
            lat[n++] = now - revoke_at;
            zframe_destroy(&holder);
            revoke_at = 0;
        }
        json_decref(m);
        zframe_destroy(&peer);
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp_ll);
    if (n > 0)
        printf("{\"samples\": %d, \"gap_ms\": %d, \"revoke_to_release_us\": {\"p50\": %lld, "
               "\"p90\": %lld, \"p99\": %lld, \"max\": %lld}}\n",
               n, gap_ms, lat[n / 2], lat[n * 9 / 10], lat[n * 99 / 100], lat[n - 1]);
    free(lat);
    zframe_destroy(&holder);
    zsock_destroy(&router);
    return n == samples ? 0 : 1;
}
