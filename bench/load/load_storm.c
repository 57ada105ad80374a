/*
 * load_storm.c - the broker's load test (doc/load-test.md): N simulated
 * hooks in S sessions, all at once, acquiring and releasing one GPU for a
 * bounded time; prints one JSON object (messages, grant latency, the
 * broker's RSS over time).  bench/load/run_load.sh starts a broker for it.
 *
 *   load_storm --endpoint EP --broker-pid PID [--clients 1000] [--sessions 200]
 *              [--warmup 10] [--warmup-grants 0] [--warmup-max 600] [--measure 50]
 *              [--drain 10] [--hold-us 1000] [--think-us 1000] [--memory-mib 0]
 *              [--threads 1] [--sample-s 1] [--seed 1] [--out FILE]
 *
 * The warm-up lasts --warmup seconds and until every client was granted
 * --warmup-grants times (at most --warmup-max seconds); then the measured
 * phase, --measure seconds; then the drain, at most --drain seconds.
 *
 * Exits 0 when the storm ran (whatever it found: the caller judges the
 * numbers), 1 when it could not run, 2 on bad options.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "load.h"

static void usage(void)
{
    fprintf(stderr,
            "usage: load_storm --endpoint EP [--broker-pid PID] [--clients N] [--sessions N]\n"
            "                  [--warmup S] [--warmup-grants N] [--warmup-max S] [--measure S]\n"
            "                  [--drain S] [--hold-us US] [--think-us US] [--memory-mib M]\n"
            "                  [--threads N] [--sample-s S] [--seed N] [--out FILE]\n");
}

static int parse(int argc, char **argv, load_config_t *cfg, const char **out)
{
    static const struct option opts[] = {{"endpoint", required_argument, 0, 'e'},
                                         {"broker-pid", required_argument, 0, 'p'},
                                         {"clients", required_argument, 0, 'c'},
                                         {"sessions", required_argument, 0, 's'},
                                         {"measure", required_argument, 0, 'M'},
                                         {"warmup", required_argument, 0, 'w'},
                                         {"drain", required_argument, 0, 'D'},
                                         {"hold-us", required_argument, 0, 'H'},
                                         {"think-us", required_argument, 0, 'T'},
                                         {"memory-mib", required_argument, 0, 'm'},
                                         {"threads", required_argument, 0, 't'},
                                         {"sample-s", required_argument, 0, 'S'},
                                         {"seed", required_argument, 0, 'r'},
                                         {"warmup-grants", required_argument, 0, 'g'},
                                         {"warmup-max", required_argument, 0, 'x'},
                                         {"out", required_argument, 0, 'o'},
                                         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'e':
            cfg->endpoint = optarg;
            break;
        case 'p':
            cfg->broker_pid = atol(optarg);
            break;
        case 'c':
            cfg->clients = atoi(optarg);
            break;
        case 's':
            cfg->sessions = atoi(optarg);
            break;
        case 'M':
            cfg->measure_s = atof(optarg);
            break;
        case 'g':
            cfg->warmup_grants = atoi(optarg);
            break;
        case 'x':
            cfg->warmup_max_s = atof(optarg);
            break;
        case 'w':
            cfg->warmup_s = atof(optarg);
            break;
        case 'D':
            cfg->drain_s = atof(optarg);
            break;
        case 'H':
            cfg->hold_us = atoll(optarg);
            break;
        case 'T':
            cfg->think_us = atoll(optarg);
            break;
        case 'm':
            cfg->memory = (uint64_t)(atof(optarg) * 1048576.0);
            break;
        case 't':
            cfg->threads = atoi(optarg);
            break;
        case 'S':
            cfg->sample_s = atof(optarg);
            break;
        case 'r':
            cfg->seed = (unsigned)atol(optarg);
            break;
        case 'o':
            *out = optarg;
            break;
        default:
            return -1;
        }
    }
    if (!cfg->endpoint)
        cfg->endpoint = getenv("GPUSHARE_BROKER");
    if (optind != argc || !cfg->endpoint || cfg->clients < 1 || cfg->sessions < 1 ||
        cfg->threads < 1 || cfg->threads > cfg->clients || cfg->measure_s <= 0 ||
        cfg->warmup_s < 0 || cfg->warmup_max_s < cfg->warmup_s || cfg->warmup_grants < 0 ||
        cfg->drain_s <= 0 || cfg->hold_us < 0 || cfg->think_us < 0 || cfg->sample_s <= 0)
        return -1;
    return 0;
}

/* Each client is a socket: its connection and its mailbox are two
 * descriptors. */
static int enough_descriptors(int clients)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)clients * 2 + 256;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (rl.rlim_cur < need && rl.rlim_max != rl.rlim_cur) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur >= need)
        return 1;
    fprintf(stderr, "load_storm: %d clients need %llu descriptors; the limit is %llu (ulimit -n)\n",
            clients, (unsigned long long)need, (unsigned long long)rl.rlim_cur);
    return 0;
}

static json_t *by_type(const uint64_t *n)
{
    json_t *o = json_object();
    for (int t = 0; t < GS_MSG_COUNT; t++)
        if (n[t])
            json_object_set_new(o, gs_msg_type_name(t), json_integer((json_int_t)n[t]));
    return o;
}

static json_t *report(const load_config_t *cfg, const load_counters_t *k, const load_result_t *r,
                      const load_client_t *clients)
{
    uint64_t sent = load_counters_total(k->sent), received = load_counters_total(k->received);
    uint64_t gmin = UINT64_MAX, gmax = 0;
    int starved = 0;
    for (int i = 0; i < cfg->clients; i++) {
        gmin = clients[i].grants < gmin ? clients[i].grants : gmin;
        gmax = clients[i].grants > gmax ? clients[i].grants : gmax;
        starved += clients[i].grants == 0;
    }
    const load_hist_t *h = &k->latency;
    json_t *codes = json_object();
    for (int i = 0; i < LOAD_MAX_CODES && k->codes[i].code[0]; i++)
        json_object_set_new(codes, k->codes[i].code, json_integer((json_int_t)k->codes[i].n));
    json_t *samples = json_array();
    for (int i = 0; i < r->nsamples; i++)
        json_array_append_new(samples,
                              json_pack("[f, I, f]", r->samples[i].t_us / 1e6,
                                        (json_int_t)r->samples[i].rss_kib, r->samples[i].cpu_s));
    double m = r->measured_s > 0 ? r->measured_s : 1;
    json_t *o = json_object();
    json_object_set_new(
        o, "config",
        json_pack("{s:i, s:i, s:i, s:f, s:i, s:f, s:f, s:f, s:I, s:I, s:I, s:s, s:s}", "clients",
                  cfg->clients, "sessions", cfg->sessions, "threads", cfg->threads, "warmup_s",
                  cfg->warmup_s, "warmup_grants", cfg->warmup_grants, "measure_s", cfg->measure_s,
                  "drain_s", cfg->drain_s, "sample_s", cfg->sample_s, "hold_us",
                  (json_int_t)cfg->hold_us, "think_us", (json_int_t)cfg->think_us, "memory_bytes",
                  (json_int_t)cfg->memory, "policy", cfg->policy, "gpu", cfg->gpu));
    json_object_set_new(o, "seconds",
                        json_pack("{s:f, s:f, s:b, s:f, s:f, s:f}", "connect", r->connect_s,
                                  "warmup", r->warmup_s, "warmup_complete", r->warmup_complete,
                                  "measured", r->measured_s, "storm", r->storm_s, "drain",
                                  r->drain_s));
    json_object_set_new(
        o, "messages",
        json_pack("{s:I, s:I, s:I, s:I, s:f, s:o, s:o}", "sent", (json_int_t)sent, "received",
                  (json_int_t)received, "total", (json_int_t)(sent + received), "measured",
                  (json_int_t)k->measured_msgs, "per_second_measured", k->measured_msgs / m,
                  "sent_by_type", by_type(k->sent), "received_by_type", by_type(k->received)));
    json_object_set_new(o, "grants",
                        json_pack("{s:I, s:I, s:f, s:I, s:I, s:I, s:i, s:I, s:I}", "total",
                                  (json_int_t)k->grants, "measured", (json_int_t)k->grants_measured,
                                  "per_second_measured", k->grants_measured / m, "revokes",
                                  (json_int_t)k->revokes, "releases", (json_int_t)k->releases,
                                  "stale", (json_int_t)k->stale, "clients_without_grant", starved,
                                  "per_client_min", (json_int_t)(cfg->clients ? gmin : 0),
                                  "per_client_max", (json_int_t)gmax));
    json_object_set_new(o, "grant_latency_us",
                        json_pack("{s:I, s:f, s:I, s:I, s:I, s:I, s:I}", "samples",
                                  (json_int_t)h->n, "mean", h->n ? h->sum / (double)h->n : 0.0,
                                  "p50", (json_int_t)load_hist_quantile(h, 0.50), "p90",
                                  (json_int_t)load_hist_quantile(h, 0.90), "p99",
                                  (json_int_t)load_hist_quantile(h, 0.99), "p999",
                                  (json_int_t)load_hist_quantile(h, 0.999), "max",
                                  (json_int_t)h->max));
    json_object_set_new(o, "errors",
                        json_pack("{s:I, s:I, s:o, s:s}", "total", (json_int_t)k->errors,
                                  "bad_frames", (json_int_t)k->bad_frame, "by_code", codes, "first",
                                  k->first_error));
    json_object_set_new(
        o, "broker",
        json_pack("{s:I, s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:I, s:f, s:f}", "pid",
                  (json_int_t)cfg->broker_pid, "rss_kib", "start", (json_int_t)r->rss_start_kib,
                  "connected", (json_int_t)r->rss_connected_kib, "after_warmup",
                  (json_int_t)r->rss_warm_kib, "end", (json_int_t)r->rss_end_kib, "max_measured",
                  (json_int_t)r->rss_max_measured_kib, "after_leave", (json_int_t)r->rss_left_kib,
                  "rss_growth_after_warmup_kib", (json_int_t)(r->rss_end_kib - r->rss_warm_kib),
                  "cpu_s_measured", r->cpu_measured_s, "cpu_percent_measured",
                  100.0 * r->cpu_measured_s / m));
    json_object_set_new(o, "after",
                        json_pack("{s:b, s:i, s:i, s:i, s:I}", "status_ok", r->after_ok, "sessions",
                                  r->after_sessions, "holders", r->after_holders, "waiting",
                                  r->after_waiting, "open_connections",
                                  (json_int_t)r->after_open_connections));
    json_object_set_new(o, "samples_t_rss_kib_cpu_s", samples);
    return o;
}

int main(int argc, char **argv)
{
    load_config_t cfg = {.clients = 1000,
                         .sessions = 200,
                         .threads = 1,
                         .measure_s = 50,
                         .warmup_max_s = 600,
                         .warmup_s = 10,
                         .drain_s = 10,
                         .hold_us = 1000,
                         .think_us = 1000,
                         .sample_s = 1,
                         .seed = 1};
    const char *out = NULL;
    if (parse(argc, argv, &cfg, &out) != 0) {
        usage();
        return 2;
    }
    if (!enough_descriptors(cfg.clients))
        return 1;
    zsys_handler_set(NULL);
    zsys_set_max_sockets((size_t)cfg.clients + 64); /* libzmq's default is 1023 */
    if (load_control_find_gpu(&cfg) != 0)
        return 1;

    load_client_t *clients = calloc((size_t)cfg.clients, sizeof *clients);
    load_worker_t *workers = calloc((size_t)cfg.threads, sizeof *workers);
    load_shared_t sh = {.cfg = &cfg};
    if (!clients || !workers) {
        fprintf(stderr, "load_storm: out of memory\n");
        return 1;
    }
    for (int i = 0; i < cfg.clients; i++)
        if (load_client_open(&clients[i], &cfg, i) != 0) {
            fprintf(stderr, "load_storm: cannot open client %d: %s\n", i,
                    zmq_strerror(zmq_errno()));
            return 1;
        }
    for (int t = 0, first = 0; t < cfg.threads; t++) {
        int n = cfg.clients / cfg.threads + (t < cfg.clients % cfg.threads);
        workers[t] = (load_worker_t){.sh = &sh, .clients = clients + first, .n = n};
        first += n;
    }
    load_result_t r;
    memset(&r, 0, sizeof r);
    int rc = load_control_run(&sh, workers, cfg.threads, &r);

    load_counters_t *total = calloc(1, sizeof *total);
    if (!total)
        return 1;
    for (int t = 0; t < cfg.threads; t++)
        load_counters_merge(total, &workers[t].counters);
    json_t *o = report(&cfg, total, &r, clients);
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f || json_dumpf(o, f, JSON_INDENT(1) | JSON_REAL_PRECISION(6)) != 0 ||
        fputc('\n', f) == EOF || (out && fclose(f) != 0)) {
        fprintf(stderr, "load_storm: cannot write %s\n", out ? out : "the report");
        rc = -1;
    }
    json_decref(o);
    free(total);
    free(r.samples);
    free(workers);
    free(clients);
    return rc == 0 ? 0 : 1;
}
