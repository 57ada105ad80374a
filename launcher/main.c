/*
 * main.c - gpushare-launch: run a kernel command with the hook preloaded.
 *
 * It execs the command in place, so the kernel keeps the pid (and the
 * signals) the notebook server knows.  The cell watcher comes with the
 * launcher issue; today the launcher only sets up the environment.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "endpoint.h"
#include "preload.h"

#ifndef GS_HOOK_PATH
#define GS_HOOK_PATH "/usr/local/lib/libgpushare-hook.so"
#endif

static void usage(FILE *out)
{
    fprintf(out, "Usage: gpushare-launch [--broker ENDPOINT] [--no-hook] -- COMMAND [ARGS...]\n"
                 "Run COMMAND (a Jupyter kernel) sharing the GPU through gpushare.\n");
}

int main(int argc, char **argv)
{
    const char *broker = NULL;
    int no_hook = 0;
    static const struct option longopts[] = {{"broker", required_argument, 0, 'b'},
                                             {"no-hook", no_argument, 0, 'n'},
                                             {"help", no_argument, 0, 'h'},
                                             {"version", no_argument, 0, 'V'},
                                             {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b': broker = optarg; break;
        case 'n': no_hook = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("gpushare-launch %s\n", PACKAGE_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "gpushare-launch: no command given\n");
        usage(stderr);
        return 2;
    }
    char err[256], ep[256];
    if (broker) {
        if (gs_endpoint_normalise(broker, ep, sizeof ep, err, sizeof err) != 0) {
            fprintf(stderr, "gpushare-launch: --broker: %s\n", err);
            return 2;
        }
        setenv("GPUSHARE_BROKER", ep, 1);
    }
    if (!no_hook) {
        const char *hook = getenv("GPUSHARE_HOOK");
        if (!hook || !*hook)
            hook = GS_HOOK_PATH;
        char value[8192];
        if (gs_preload_value(hook, getenv("LD_PRELOAD"), value, sizeof value) != 0) {
            fprintf(stderr, "gpushare-launch: LD_PRELOAD is too long\n");
            return 2;
        }
        setenv("LD_PRELOAD", value, 1);
    }
    execvp(argv[optind], argv + optind);
    fprintf(stderr, "gpushare-launch: cannot run \"%s\": %s\n", argv[optind], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
