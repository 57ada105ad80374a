/*
 * load_control.c - the storm's phases and what is measured of the broker
 * (load.h).  All clients connect and join first, so that the storm starts
 * with all of them at once; a warm-up follows (the broker's tables, the
 * allocator's arenas and ZeroMQ's buffers grow to their working size),
 * then the measured phase, then a drain in which every client takes its
 * last grant and leaves.  The broker's RSS (VmRSS of /proc/PID/status) is
 * sampled throughout: a leak shows as growth after the warm-up, which
 * would be flat otherwise whatever the number of messages.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "load.h"
#include "wire.h"

#define SEC             1000000LL
#define CONNECT_TIMEOUT (120 * SEC)
#define LEAVE_TIMEOUT   (10 * SEC) /* the broker forgets the clients that left */

long load_rss_kib(long pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = pid > 0 ? fopen(path, "r") : NULL;
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

double load_cpu_s(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = pid > 0 ? fopen(path, "r") : NULL;
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    /* After the command's ")" (it may hold spaces): state is field 3,
     * utime and stime fields 14 and 15. */
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void sample(const load_config_t *cfg, load_result_t *r, int64_t t0)
{
    if (r->nsamples == r->capsamples) {
        int cap = r->capsamples ? 2 * r->capsamples : 256;
        load_sample_t *s = realloc(r->samples, (size_t)cap * sizeof *s);
        if (!s)
            return;
        r->samples = s;
        r->capsamples = cap;
    }
    load_sample_t *s = &r->samples[r->nsamples++];
    s->t_us = load_now_us() - t0;
    s->rss_kib = load_rss_kib(cfg->broker_pid);
    s->cpu_s = load_cpu_s(cfg->broker_pid);
}

/* Sleeps until `until`, sampling every sample_s; returns early (0) when
 * stop() says so, else 1. */
static int wait_sampling(load_shared_t *sh, load_result_t *r, int64_t t0, int64_t until,
                         int (*stop)(load_shared_t *), int64_t *next_sample)
{
    const load_config_t *cfg = sh->cfg;
    int64_t every = (int64_t)(cfg->sample_s * SEC);
    for (;;) {
        int64_t now = load_now_us();
        if (now >= *next_sample) {
            sample(cfg, r, t0);
            *next_sample = now + every;
        }
        if (stop && stop(sh))
            return 0;
        if (now >= until)
            return 1;
        int64_t t = until < *next_sample ? until : *next_sample;
        long ms = (long)((t - now + 999) / 1000);
        if (stop && ms > 10)
            ms = 10; /* its condition is polled */
        zclock_sleep((int)(ms > 0 ? ms : 1));
    }
}

static int all_joined(load_shared_t *sh)
{
    return atomic_load(&sh->joined) >= sh->cfg->clients || atomic_load(&sh->failed);
}

static int all_warmed(load_shared_t *sh)
{
    return atomic_load(&sh->warmed) >= sh->cfg->clients || sh->cfg->warmup_grants <= 0 ||
           atomic_load(&sh->failed);
}

static int all_done(load_shared_t *sh)
{
    return atomic_load(&sh->done) >= sh->cfg->clients || atomic_load(&sh->failed);
}

/* A CLI connection to the broker (hello answered); NULL on failure. */
static zsock_t *cli_open(const char *endpoint)
{
    zsock_t *s = zsock_new(ZMQ_DEALER);
    if (!s)
        return NULL;
    zsock_set_linger(s, 0);
    zsock_set_rcvtimeo(s, 10000);
    if (zsock_connect(s, "%s", endpoint) != 0) {
        zsock_destroy(&s);
        return NULL;
    }
    json_t *h = gs_msg_new(GS_MSG_HELLO);
    json_object_set_new(h, "seq", json_integer(1));
    json_object_set_new(h, "role", json_string("cli"));
    json_object_set_new(h, "pid", json_integer(getpid()));
    gs_perr_t err;
    int rc = gs_wire_send(s, NULL, h, &err);
    json_decref(h);
    gs_msg_type_t type = GS_MSG_COUNT;
    json_t *w = rc == 0 ? gs_wire_recv(s, NULL, &type, &err, NULL, NULL) : NULL;
    json_decref(w);
    if (type != GS_MSG_WELCOME)
        zsock_destroy(&s);
    return s;
}

/* The broker's status object (new reference), or NULL. */
static json_t *cli_status(zsock_t *s)
{
    json_t *q = gs_msg_new(GS_MSG_STATUS);
    json_object_set_new(q, "seq", json_integer(2));
    gs_perr_t err;
    int rc = gs_wire_send(s, NULL, q, &err);
    json_decref(q);
    gs_msg_type_t type = GS_MSG_COUNT;
    json_t *r = rc == 0 ? gs_wire_recv(s, NULL, &type, &err, NULL, NULL) : NULL;
    json_t *st =
        r && type == GS_MSG_STATUS_REPLY ? json_incref(json_object_get(r, "status")) : NULL;
    json_decref(r);
    return st;
}

int load_control_find_gpu(load_config_t *cfg)
{
    zsock_t *s = cli_open(cfg->endpoint);
    json_t *st = s ? cli_status(s) : NULL;
    zsock_destroy(&s);
    json_t *g0 = json_array_get(json_object_get(st, "gpus"), 0);
    if (!g0) {
        fprintf(stderr, "load_storm: %s\n",
                st ? "the broker has no GPU (start it on the simulated one)"
                   : "no status from the broker");
        json_decref(st);
        return -1;
    }
    snprintf(cfg->gpu, sizeof cfg->gpu, "%s", json_string_value(json_object_get(g0, "uuid")));
    const char *policy = json_string_value(json_object_get(st, "policy"));
    snprintf(cfg->policy, sizeof cfg->policy, "%s", policy ? policy : "?");
    json_decref(st);
    return 0;
}

/* The broker after the clients left: its tables must be empty again.
 * Their last releases travel on their own connections, which the broker
 * reads in any order with this one, so look until they are or time is up. */
static void after(load_shared_t *sh, load_result_t *r)
{
    zsock_t *s = cli_open(sh->cfg->endpoint);
    int64_t until = load_now_us() + LEAVE_TIMEOUT;
    while (s) {
        json_t *st = cli_status(s);
        json_t *g0 = json_array_get(json_object_get(st, "gpus"), 0);
        r->after_ok = g0 != NULL;
        r->after_sessions = (int)json_array_size(json_object_get(g0, "sessions"));
        r->after_holders = (int)json_array_size(json_object_get(g0, "holders"));
        r->after_waiting = (int)json_array_size(json_object_get(g0, "waiting"));
        r->after_open_connections =
            json_integer_value(json_object_get(json_object_get(st, "connections"), "open"));
        json_decref(st);
        if (!r->after_ok || (!r->after_sessions && !r->after_holders && !r->after_waiting) ||
            load_now_us() >= until)
            break;
        zclock_sleep(100);
    }
    zsock_destroy(&s);
}

int load_control_run(load_shared_t *sh, load_worker_t *workers, int nworkers, load_result_t *r)
{
    const load_config_t *cfg = sh->cfg;
    int64_t t0 = load_now_us(), next_sample = t0;
    r->rss_start_kib = load_rss_kib(cfg->broker_pid);
    atomic_store(&sh->phase, LOAD_CONNECT);
    for (int i = 0; i < nworkers; i++)
        if (load_worker_start(&workers[i]) != 0) {
            fprintf(stderr, "load_storm: cannot start a thread\n");
            atomic_store(&sh->phase, LOAD_STOP);
            for (int k = 0; k < i; k++)
                load_worker_join(&workers[k]);
            return -1;
        }
    int ok = !wait_sampling(sh, r, t0, t0 + CONNECT_TIMEOUT, all_joined, &next_sample);
    int64_t storm = load_now_us();
    r->connect_s = (double)(storm - t0) / SEC;
    r->rss_connected_kib = load_rss_kib(cfg->broker_pid);
    if (ok && !atomic_load(&sh->failed)) {
        atomic_store(&sh->phase, LOAD_WARMUP);
        /* Long enough for the broker's per-connection buffers to reach
         * their working size (doc/load-test.md): a time, and a number of
         * grants of every client. */
        wait_sampling(sh, r, t0, storm + (int64_t)(cfg->warmup_s * SEC), NULL, &next_sample);
        r->warmup_complete = wait_sampling(sh, r, t0, storm + (int64_t)(cfg->warmup_max_s * SEC),
                                           all_warmed, &next_sample) == 0;
        r->rss_warm_kib = load_rss_kib(cfg->broker_pid);
        double cpu0 = load_cpu_s(cfg->broker_pid);
        int64_t m0 = load_now_us();
        r->warmup_s = (double)(m0 - storm) / SEC;
        atomic_store(&sh->phase, LOAD_MEASURE);
        int first = r->nsamples;
        wait_sampling(sh, r, t0, m0 + (int64_t)(cfg->measure_s * SEC), NULL, &next_sample);
        r->rss_end_kib = load_rss_kib(cfg->broker_pid);
        r->cpu_measured_s = load_cpu_s(cfg->broker_pid) - cpu0;
        int64_t m1 = load_now_us();
        r->measured_s = (double)(m1 - m0) / SEC;
        r->storm_s = (double)(m1 - storm) / SEC;
        r->rss_max_measured_kib = r->rss_end_kib;
        for (int i = first; i < r->nsamples; i++)
            if (r->samples[i].rss_kib > r->rss_max_measured_kib)
                r->rss_max_measured_kib = r->samples[i].rss_kib;
    } else {
        fprintf(stderr, "load_storm: only %d of %d clients joined within %lld s\n",
                atomic_load(&sh->joined), cfg->clients, CONNECT_TIMEOUT / SEC);
    }
    int64_t d0 = load_now_us();
    atomic_store(&sh->phase, LOAD_DRAIN);
    wait_sampling(sh, r, t0, d0 + (int64_t)(cfg->drain_s * SEC), all_done, &next_sample);
    atomic_store(&sh->phase, LOAD_STOP);
    for (int i = 0; i < nworkers; i++) {
        load_worker_join(&workers[i]);
        for (int k = 0; k < workers[i].n; k++)
            load_client_close(&workers[i].clients[k]);
    }
    r->drain_s = (double)(load_now_us() - d0) / SEC;
    after(sh, r);
    r->rss_left_kib = load_rss_kib(cfg->broker_pid);
    sample(cfg, r, t0);
    return ok && !atomic_load(&sh->failed) ? 0 : -1;
}
