/*
 * main.c - gpushare-broker's command line.
 */
#include <getopt.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"
#include "config.h"
#include "endpoint.h"
#include "log.h"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: gpushare-broker [OPTIONS]\n"
            "Schedule one machine's GPUs among Jupyter notebooks (see gpushare-broker(8)).\n\n"
            "  -e, --endpoint EP     listen on EP (ipc://PATH or a path); default\n"
            "                        $GPUSHARE_BROKER, else $XDG_RUNTIME_DIR/gpushare/broker.sock\n"
            "      --system          run as the system service (/run/gpushare/broker.sock)\n"
            "      --socket-group G  let group G connect (with --system)\n"
            "  -c, --config FILE     configuration file (default /etc/gpushare/broker.conf\n"
            "                        when it exists; keys in gpushare-broker(8))\n"
            "      --policy P        exclusive, burst or adaptive (default adaptive)\n"
            "      --tq SECONDS      time quantum of the exclusive policy (default 20)\n"
            "      --scheduler on|off\n"
            "      --event-log FILE  append a JSON line per event to FILE\n"
            "      --metrics-port N  serve Prometheus metrics on 127.0.0.1:N\n"
            "      --set KEY=VALUE   any configuration key (flags win over the file)\n"
            "  -v, --verbose         log at info level (twice: debug)\n"
            "  -h, --help            show this help\n"
            "  -V, --version         show the version\n");
}

int main(int argc, char **argv)
{
    gs_log_init("gpushare-broker", GS_LOG_WARN);
    gs_broker_options_t opt = {.socket_group = (gid_t)-1};
    int verbose = 0;
    char err[256];
    static const struct option longopts[] = {{"endpoint", required_argument, 0, 'e'},
                                             {"system", no_argument, 0, 's'},
                                             {"socket-group", required_argument, 0, 'g'},
                                             {"verbose", no_argument, 0, 'v'},
                                             {"config", required_argument, 0, 'c'},
                                             {"policy", required_argument, 0, 'P'},
                                             {"tq", required_argument, 0, 'T'},
                                             {"scheduler", required_argument, 0, 'S'},
                                             {"event-log", required_argument, 0, 'L'},
                                             {"metrics-port", required_argument, 0, 'M'},
                                             {"set", required_argument, 0, 'X'},
                                             {"help", no_argument, 0, 'h'},
                                             {"version", no_argument, 0, 'V'},
                                             {0, 0, 0, 0}};
    int c;
    int rc = 2;
    while ((c = getopt_long(argc, argv, "e:c:vhV", longopts, NULL)) != -1) {
        const char *key = NULL, *value = optarg;
        char kbuf[64];
        switch (c) {
        case 'c':
            if (strlen(optarg) >= sizeof opt.config_path) {
                fprintf(stderr, "gpushare-broker: --config: path too long\n");
                goto out;
            }
            snprintf(opt.config_path, sizeof opt.config_path, "%s", optarg);
            break;
        case 'P':
            key = "policy";
            break;
        case 'T':
            key = "tq";
            break;
        case 'S':
            key = "scheduler";
            break;
        case 'L':
            key = "event_log";
            break;
        case 'M':
            key = "metrics_port";
            break;
        case 'X': {
            const char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || (size_t)(eq - optarg) >= sizeof kbuf) {
                fprintf(stderr, "gpushare-broker: --set: \"%s\" is not KEY=VALUE\n", optarg);
                goto out;
            }
            snprintf(kbuf, sizeof kbuf, "%.*s", (int)(eq - optarg), optarg);
            key = kbuf;
            value = eq + 1;
            break;
        }
        case 'e':
            if (gs_endpoint_normalise(optarg, opt.endpoint, sizeof opt.endpoint, err, sizeof err) !=
                0) {
                fprintf(stderr, "gpushare-broker: --endpoint: %s\n", err);
                goto out;
            }
            break;
        case 's':
            opt.system = 1;
            break;
        case 'g': {
            struct group *gr = getgrnam(optarg);
            if (!gr) {
                fprintf(stderr, "gpushare-broker: --socket-group: no group named \"%s\"\n", optarg);
                goto out;
            }
            opt.socket_group = gr->gr_gid;
            break;
        }
        case 'v':
            verbose++;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("gpushare-broker %s\n", PACKAGE_VERSION);
            return 0;
        default:
            usage(stderr);
            goto out;
        }
        if (key && gs_config_add(&opt.overrides, key, value, 0, err, sizeof err) != 0) {
            fprintf(stderr, "gpushare-broker: %s\n", err);
            goto out;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gpushare-broker: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        goto out;
    }
    if (verbose)
        gs_log_set_level(verbose > 1 ? GS_LOG_DEBUG : GS_LOG_INFO);
    snprintf(opt.overrides.path, sizeof opt.overrides.path, "command line");

    gs_broker_t *broker = gs_broker_new(&opt, err, sizeof err);
    if (!broker) {
        fprintf(stderr, "gpushare-broker: %s\n", err);
        rc = 1;
        goto out;
    }
    rc = gs_broker_run(broker);
    gs_broker_destroy(&broker);
out:
    gs_config_free(&opt.overrides);
    return rc;
}
