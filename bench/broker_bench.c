/*
 * broker_bench.c - the broker's own costs, measured from clients that speak
 * the protocol exactly as the hook does (DEALER sockets, hello/join first).
 *
 *   broker_bench ENDPOINT rtt N        acquire -> grant round trip, uncontended
 *   broker_bench ENDPOINT handoff N    holder's release -> next holder's grant
 *                                      (broker in the exclusive policy)
 *   broker_bench ENDPOINT throughput S messages per second for S seconds
 *                                      (heartbeats + memory reports from 8 clients)
 *   broker_bench ENDPOINT idle N S     N joined, idle clients heartbeating for S
 *                                      seconds (measure the broker's CPU outside)
 * Each mode prints one JSON line.
 */
#include <czmq.h>
#include <stdlib.h>
#include <unistd.h>

#include "protocol.h"
#include "wire.h"

typedef struct {
    zsock_t *sock;
    long long seq;
    char session[64];
} client_t;

static const char *endpoint;
static char gpu[64];

static long long now_us(void)
{
    return zclock_usecs();
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static void send_msg(client_t *c, json_t *m)
{
    json_object_set_new(m, "seq", json_integer(++c->seq));
    gs_perr_t err;
    if (gs_wire_send(c->sock, NULL, m, &err) != 0) {
        fprintf(stderr, "broker_bench: send failed\n");
        exit(1);
    }
    json_decref(m);
}

/* Next message of the given type (others are dropped); exits on timeout. */
static json_t *expect(client_t *c, gs_msg_type_t want)
{
    for (;;) {
        gs_msg_type_t type;
        gs_perr_t err;
        json_t *m = gs_wire_recv(c->sock, NULL, &type, &err, NULL, NULL);
        if (!m) {
            fprintf(stderr, "broker_bench: no %s from the broker\n", gs_msg_type_name(want));
            exit(1);
        }
        if (type == want)
            return m;
        if (type == GS_MSG_ERROR) {
            fprintf(stderr, "broker_bench: error: %s\n", gs_msg_str(m, "message", "?"));
            exit(1);
        }
        json_decref(m);
    }
}

static void client_open(client_t *c, const char *session)
{
    memset(c, 0, sizeof *c);
    c->sock = zsock_new(ZMQ_DEALER);
    zsock_set_rcvtimeo(c->sock, 5000);
    zsock_set_linger(c->sock, 0);
    zsock_set_rcvhwm(c->sock, 0);
    zsock_set_sndhwm(c->sock, 0);
    if (zsock_connect(c->sock, "%s", endpoint) != 0) {
        fprintf(stderr, "broker_bench: cannot connect to %s\n", endpoint);
        exit(1);
    }
    json_t *h = gs_msg_new(GS_MSG_HELLO);
    json_object_set_new(h, "role", json_string("hook"));
    json_object_set_new(h, "pid", json_integer(getpid()));
    send_msg(c, h);
    json_decref(expect(c, GS_MSG_WELCOME));
    json_t *j = gs_msg_new(GS_MSG_JOIN);
    json_object_set_new(j, "pid", json_integer(getpid()));
    json_object_set_new(j, "session", json_string(session));
    json_object_set_new(j, "devices", json_pack("[s]", gpu));
    send_msg(c, j);
    json_decref(expect(c, GS_MSG_OK));
    snprintf(c->session, sizeof c->session, "%s", session);
}

static long long acquire(client_t *c)
{
    json_t *a = gs_msg_new(GS_MSG_ACQUIRE);
    json_object_set_new(a, "device", json_string(gpu));
    send_msg(c, a);
    json_t *g = expect(c, GS_MSG_GRANT);
    long long id = gs_msg_int(g, "grant_id", 0);
    json_decref(g);
    return id;
}

static void release(client_t *c, long long grant_id)
{
    json_t *r = gs_msg_new(GS_MSG_RELEASE);
    json_object_set_new(r, "device", json_string(gpu));
    json_object_set_new(r, "grant_id", json_integer(grant_id));
    json_object_set_new(r, "reason", json_string("idle"));
    send_msg(c, r);
}

static void report(const char *what, long long *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_ll);
    printf("{\"mode\": \"%s\", \"samples\": %d, \"us\": {\"p50\": %lld, \"p90\": %lld, "
           "\"p99\": %lld, \"max\": %lld}}\n",
           what, n, v[n / 2], v[n * 9 / 10], v[n * 99 / 100], v[n - 1]);
}

static void find_gpu(void)
{
    client_t c;
    memset(&c, 0, sizeof c);
    c.sock = zsock_new(ZMQ_DEALER);
    zsock_set_rcvtimeo(c.sock, 5000);
    zsock_connect(c.sock, "%s", endpoint);
    json_t *h = gs_msg_new(GS_MSG_HELLO);
    json_object_set_new(h, "role", json_string("cli"));
    json_object_set_new(h, "pid", json_integer(getpid()));
    send_msg(&c, h);
    json_decref(expect(&c, GS_MSG_WELCOME));
    send_msg(&c, gs_msg_new(GS_MSG_STATUS));
    json_t *r = expect(&c, GS_MSG_STATUS_REPLY);
    json_t *g0 = json_array_get(json_object_get(json_object_get(r, "status"), "gpus"), 0);
    if (!g0) {
        fprintf(stderr, "broker_bench: the broker has no GPU (start it on the simulated one)\n");
        exit(1);
    }
    snprintf(gpu, sizeof gpu, "%s", gs_msg_str(g0, "uuid", ""));
    json_decref(r);
    zsock_destroy(&c.sock);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: broker_bench ENDPOINT rtt|handoff|throughput|idle ARGS\n");
        return 2;
    }
    zsys_handler_set(NULL);
    endpoint = argv[1];
    const char *mode = argv[2];
    int n = atoi(argv[3]);
    if (n <= 0) {
        fprintf(stderr, "broker_bench: the count must be positive\n");
        return 2;
    }
    find_gpu();
    if (!strcmp(mode, "rtt")) {
        client_t c;
        client_open(&c, "bench-rtt");
        long long *v = calloc((size_t)n, sizeof *v);
        for (int i = 0; i < n + 100; i++) {
            long long t0 = now_us();
            long long id = acquire(&c);
            long long t1 = now_us();
            release(&c, id);
            if (i >= 100)
                v[i - 100] = t1 - t0;
        }
        report("grant_round_trip", v, n);
        zsock_destroy(&c.sock);
        free(v);
    } else if (!strcmp(mode, "handoff")) {
        client_t a, b;
        client_open(&a, "bench-a");
        client_open(&b, "bench-b");
        long long *v = calloc((size_t)n, sizeof *v);
        long long ida = acquire(&a);
        for (int i = 0; i < n; i++) {
            /* b waits behind a; a gives the GPU back; time until b has it. */
            json_t *acq = gs_msg_new(GS_MSG_ACQUIRE);
            json_object_set_new(acq, "device", json_string(gpu));
            send_msg(&b, acq);
            /* The broker handles b's messages in order: once the status reply
             * is back, b is queued behind a. */
            send_msg(&b, gs_msg_new(GS_MSG_STATUS));
            json_decref(expect(&b, GS_MSG_STATUS_REPLY));
            long long t0 = now_us();
            release(&a, ida);
            json_t *g = expect(&b, GS_MSG_GRANT);
            v[i] = now_us() - t0;
            long long idb = gs_msg_int(g, "grant_id", 0);
            json_decref(g);
            /* swap roles */
            client_t t = a;
            a = b;
            b = t;
            ida = idb;
        }
        report("handoff", v, n);
        zsock_destroy(&a.sock);
        zsock_destroy(&b.sock);
        free(v);
    } else if (!strcmp(mode, "throughput")) {
        enum { NC = 8 };
        client_t c[NC];
        for (int k = 0; k < NC; k++) {
            char s[32];
            snprintf(s, sizeof s, "bench-t%d", k);
            client_open(&c[k], s);
        }
        long long sent = 0, end = now_us() + (long long)n * 1000000;
        long long t0 = now_us();
        while (now_us() < end) {
            for (int k = 0; k < NC; k++)
                for (int j = 0; j < 64; j++) {
                    json_t *m = gs_msg_new(GS_MSG_MEMORY);
                    json_object_set_new(m, "device", json_string(gpu));
                    json_object_set_new(m, "used_bytes", json_integer(sent));
                    send_msg(&c[k], m);
                    sent++;
                }
            /* A round trip per batch keeps the broker's queue bounded and
             * proves everything before it was processed. */
            send_msg(&c[0], gs_msg_new(GS_MSG_STATUS));
            json_decref(expect(&c[0], GS_MSG_STATUS_REPLY));
            sent++;
        }
        double secs = (now_us() - t0) / 1e6;
        printf("{\"mode\": \"throughput\", \"messages\": %lld, \"seconds\": %.2f, "
               "\"messages_per_second\": %.0f}\n",
               sent, secs, sent / secs);
        for (int k = 0; k < NC; k++)
            zsock_destroy(&c[k].sock);
    } else if (!strcmp(mode, "idle")) {
        int secs = argc > 4 ? atoi(argv[4]) : 10;
        client_t *c = calloc((size_t)n, sizeof *c);
        for (int k = 0; k < n; k++) {
            char s[32];
            snprintf(s, sizeof s, "bench-idle%d", k);
            client_open(&c[k], s);
        }
        printf("{\"mode\": \"idle\", \"clients\": %d, \"ready\": true}\n", n);
        fflush(stdout);
        long long end = now_us() + (long long)secs * 1000000;
        while (now_us() < end) {
            for (int k = 0; k < n; k++)
                send_msg(&c[k], gs_msg_new(GS_MSG_HEARTBEAT));
            zclock_sleep(1000);
        }
        for (int k = 0; k < n; k++)
            zsock_destroy(&c[k].sock);
        free(c);
    } else {
        fprintf(stderr, "broker_bench: unknown mode \"%s\"\n", mode);
        return 2;
    }
    return 0;
}
