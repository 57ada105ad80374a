/*
 * cli_main.c - `gpushare`: the command-line tool (status, control,
 * kernelspec install).  Each subcommand lives in its own cli_*.c file.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli_kernelspec.h"
#include "cli_run.h"
#include "cli_set.h"
#include "cli_status.h"
#include "cli_top.h"
#include "config.h"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: gpushare [--broker ENDPOINT] COMMAND [ARGS]\n"
            "Commands:\n"
            "  status [--json | --watch]    sessions, grants and memory per GPU\n"
            "  top [--once] [--interval S]  the same, live: a line per session, every second\n"
            "  set [--persist] KEY=VALUE... change policy, tq, boost, shares (admins)\n"
            "  run [--name NAME] -- COMMAND [ARGS]\n"
            "                               run any program sharing the GPU, as its own session\n"
            "  kernelspec install|list      install the \"Shared GPU\" Jupyter kernel; list them\n"
            "  version                      show the version\n"
            "Options: --broker ENDPOINT, -h/--help, -V/--version.\n"
            "`gpushare COMMAND --help` says more.  The broker is found through --broker,\n"
            "$GPUSHARE_BROKER, the per-user socket or /run/gpushare/broker.sock (see\n"
            "gpushare(1)).\n");
}

/* getopt stopped at an option it does not know, or at --broker without
 * its endpoint: name it as it was written.  Returns the exit status. */
static int bad_option(int c, char **argv)
{
    if (c == '?' && optopt) /* a short one: "-x" */
        fprintf(stderr, "gpushare: unknown option \"-%c\"\n", optopt);
    else /* a long one, whole: "--weird", "--broker" */
        fprintf(stderr, "gpushare: unknown option \"%s\"\n", argv[optind - 1]);
    usage(stderr);
    return 2;
}

int main(int argc, char **argv)
{
    const char *endpoint = NULL;
    static const struct option longopts[] = {{"broker", required_argument, 0, 'b'},
                                             {"help", no_argument, 0, 'h'},
                                             {"version", no_argument, 0, 'V'},
                                             {0, 0, 0, 0}};
    /* '+': the options end at the command, whose own options are its own.
     * ':' and opterr = 0: the message is ours, not getopt's. */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "+:hV", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            endpoint = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("gpushare %s\n", PACKAGE_VERSION);
            return 0;
        default:
            return bad_option(c, argv);
        }
    }
    opterr = 1; /* the subcommands' getopt speaks for itself */
    int i = optind;
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[i];
    /* getopt names a bad option after argv[0]: the subcommands' parsers
     * read "gpushare status: unrecognized option", not "status: ...". */
    char prog[64];
    snprintf(prog, sizeof prog, "gpushare %s", cmd);
    argv[i] = prog;
    if (!strcmp(cmd, "status"))
        return gs_cli_status_main(argc - i, argv + i, endpoint);
    if (!strcmp(cmd, "top"))
        return gs_cli_top_main(argc - i, argv + i, endpoint);
    if (!strcmp(cmd, "set"))
        return gs_cli_set_main(argc - i, argv + i, endpoint);
    if (!strcmp(cmd, "run"))
        return gs_cli_run_main(argc - i, argv + i, endpoint);
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
