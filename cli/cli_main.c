/*
 * cli_main.c - `gpushare`: the command-line tool (status, control,
 * kernelspec install).  Each subcommand lives in its own cli_*.c file.
 */
#include <stdio.h>
#include <string.h>

#include "cli_kernelspec.h"
#include "cli_set.h"
#include "cli_status.h"
#include "config.h"

static void usage(FILE *out)
{
    fprintf(out, "Usage: gpushare [--broker ENDPOINT] COMMAND [ARGS]\n"
                 "Commands:\n"
                 "  status [--json]        sessions, grants and memory per GPU\n"
                 "  set KEY=VALUE...       change policy, tq, boost, shares (admins)\n"
                 "  kernelspec install     install the \"Shared GPU\" Jupyter kernel\n"
                 "  version                show the version\n"
                 "The broker is found through --broker, $GPUSHARE_BROKER, the per-user\n"
                 "socket or /run/gpushare/broker.sock (see gpushare(1)).\n");
}

int main(int argc, char **argv)
{
    const char *endpoint = NULL;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--broker") && i + 1 < argc)
            endpoint = argv[++i];
        else if (!strncmp(argv[i], "--broker=", 9))
            endpoint = argv[i] + 9;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-V") || !strcmp(argv[i], "--version")) {
            printf("gpushare %s\n", PACKAGE_VERSION);
            return 0;
        } else {
            fprintf(stderr, "gpushare: unknown option \"%s\"\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[i];
    if (!strcmp(cmd, "status"))
        return gs_cli_status_main(argc - i, argv + i, endpoint);
    if (!strcmp(cmd, "set"))
        return gs_cli_set_main(argc - i, argv + i, endpoint);
    if (!strcmp(cmd, "kernelspec"))
        return gs_cli_kernelspec_main(argc - i, argv + i);
    if (!strcmp(cmd, "version")) {
        printf("gpushare %s\n", PACKAGE_VERSION);
        return 0;
    }
    fprintf(stderr, "gpushare: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return 2;
}
