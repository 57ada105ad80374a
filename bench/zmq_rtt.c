/*
 * zmq_rtt.c - the platform's floor under revoke_latency: the round trip of
 * one small message between two processes over a ZeroMQ ipc socket (a
 * ROUTER, like the broker, and a DEALER, like the hook), with the same
 * idle gap between messages as the revoke benchmark.  On a VM, thread
 * wake-ups dominate it.
 *   zmq_rtt SAMPLES GAP_MS   -> one JSON line on stdout
 */
#include <czmq.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int samples = argc > 1 ? atoi(argv[1]) : 500, gap_ms = argc > 2 ? atoi(argv[2]) : 5;
    if (samples <= 0 || gap_ms < 0) {
        fprintf(stderr, "usage: zmq_rtt SAMPLES GAP_MS\n");
        return 2;
    }
    char ep[64];
    snprintf(ep, sizeof ep, "ipc:///tmp/zmq_rtt.%d", (int)getpid());
    zsys_handler_set(NULL);
    pid_t child = fork();
    if (child == 0) { /* the echoing "hook" */
        zsock_t *d = zsock_new_dealer(ep);
        zstr_send(d, "ready");
        for (;;) {
            char *m = zstr_recv(d);
            if (!m || !strcmp(m, "bye")) {
                free(m);
                break;
            }
            zstr_send(d, m);
            free(m);
        }
        zsock_destroy(&d);
        _exit(0);
    }
    zsock_t *r = zsock_new_router(ep);
    zmsg_t *hello = zmsg_recv(r); /* identity + "ready" */
    zframe_t *peer = zmsg_pop(hello);
    zmsg_destroy(&hello);
    long long *rtt = calloc((size_t)samples, sizeof *rtt);
    for (int i = 0; i < samples; i++) {
        if (gap_ms)
            zclock_sleep(gap_ms);
        long long t0 = zclock_usecs();
        zmsg_t *m = zmsg_new();
        zmsg_append(m, &(zframe_t *){zframe_dup(peer)});
        zmsg_addstr(m, "{\"v\":1,\"type\":\"revoke\"}");
        zmsg_send(&m, r);
        zmsg_t *back = zmsg_recv(r);
        rtt[i] = zclock_usecs() - t0;
        zmsg_destroy(&back);
    }
    zmsg_t *bye = zmsg_new();
    zmsg_append(bye, &(zframe_t *){zframe_dup(peer)});
    zmsg_addstr(bye, "bye");
    zmsg_send(&bye, r);
    waitpid(child, NULL, 0);
    qsort(rtt, (size_t)samples, sizeof *rtt, cmp_ll);
    printf("{\"samples\": %d, \"gap_ms\": %d, \"rtt_us\": {\"p50\": %lld, \"p90\": %lld, "
           "\"p99\": %lld}}\n",
           samples, gap_ms, rtt[samples / 2], rtt[samples * 9 / 10], rtt[samples * 99 / 100]);
    zframe_destroy(&peer);
    zsock_destroy(&r);
    free(rtt);
    return 0;
}
