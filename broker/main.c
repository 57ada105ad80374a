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
    fprintf(out, "Usage: gpushare-broker [OPTIONS]\n"
                 "Schedule one machine's GPUs among Jupyter notebooks (see gpushare-broker(8)).\n\n"
                 "  -e, --endpoint EP     listen on EP (ipc://PATH or a path); default\n"
                 "                        $GPUSHARE_BROKER, else $XDG_RUNTIME_DIR/gpushare/broker.sock\n"
                 "      --system          run as the system service (/run/gpushare/broker.sock)\n"
                 "      --socket-group G  let group G connect (with --system)\n"
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
    static const struct option longopts[] = {
        {"endpoint", required_argument, 0, 'e'}, {"system", no_argument, 0, 's'},
        {"socket-group", required_argument, 0, 'g'}, {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "e:vhV", longopts, NULL)) != -1) {
        switch (c) {
        case 'e':
            if (gs_endpoint_normalise(optarg, opt.endpoint, sizeof opt.endpoint, err,
                                      sizeof err) != 0) {
                fprintf(stderr, "gpushare-broker: --endpoint: %s\n", err);
                return 2;
            }
            break;
        case 's':
            opt.system = 1;
            break;
        case 'g': {
            struct group *gr = getgrnam(optarg);
            if (!gr) {
                fprintf(stderr, "gpushare-broker: --socket-group: no group named \"%s\"\n",
                        optarg);
                return 2;
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
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gpushare-broker: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (verbose)
        gs_log_set_level(verbose > 1 ? GS_LOG_DEBUG : GS_LOG_INFO);

    gs_broker_t *broker = gs_broker_new(&opt, err, sizeof err);
    if (!broker) {
        fprintf(stderr, "gpushare-broker: %s\n", err);
        return 1;
    }
    int rc = gs_broker_run(broker);
    gs_broker_destroy(&broker);
    return rc;
}
