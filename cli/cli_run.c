/*
 * cli_run.c - see cli_run.h.
 *
 * The command is exec'd in place, so it keeps the pid, process group,
 * signals and exit status it would have had without gpushare: a script,
 * an IDE or a terminal that starts it sees no wrapper.  Everything the
 * hook needs goes through the environment, which the command's children
 * inherit: the whole process tree is one session.
 *
 * Fail open, as the hook does: a hook library that is missing is said in
 * one line and the command runs ungated (a job must not fail because
 * gpushare is half installed); a missing broker is the hook's to say.
 * Only what the user typed wrongly (a bad name, no command) stops it.
 */
#define _GNU_SOURCE
#include "cli_run.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "endpoint.h"
#include "hook_path.h"
#include "preload.h"
#include "protocol.h"

#ifndef GS_HOOK_PATH
#define GS_HOOK_PATH "/usr/local/lib/libgpushare-hook.so"
#endif

static void usage(FILE *out)
{
    fprintf(out, "Usage: gpushare run [--name NAME] [--broker ENDPOINT] [--] COMMAND [ARGS...]\n"
                 "Run COMMAND (any program: a script, a shell, an IDE's process) sharing the\n"
                 "GPU through gpushare, as a session of its own that `gpushare status` shows\n"
                 "as NAME (default: the program's name and its pid, e.g. python3-4242).\n"
                 "Processes run with the same NAME share one session.  Without a broker, or\n"
                 "without the hook library, COMMAND runs anyway, without GPU sharing.\n"
                 "The exit status is COMMAND's (127: not found, 126: not executable).\n");
}

/* The default session name: the program's base name, with what an id may
 * not hold replaced by '_', then "-PID" (the command keeps this pid). */
static void default_name(const char *cmd, char *out, size_t outlen)
{
    char copy[512];
    snprintf(copy, sizeof copy, "%s", cmd);
    const char *base = basename(copy);
    char clean[64];
    size_t n = 0;
    for (const char *p = base; *p && n < sizeof clean - 1; p++) {
        int ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                 strchr(GS_PROTO_ID_PUNCT, *p);
        clean[n++] = ok ? *p : '_';
    }
    clean[n] = '\0';
    snprintf(out, outlen, "%s-%ld", n ? clean : "run", (long)getpid());
}

int gs_cli_run_main(int argc, char **argv, const char *endpoint)
{
    const char *name = NULL;
    static const struct option longopts[] = {{"name", required_argument, 0, 'n'},
                                             {"broker", required_argument, 0, 'b'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int c;
    optind = 0; /* afresh: gpushare's own options were parsed with other rules */
    opterr = 0; /* the messages are ours, prefixed "gpushare run" */
    /* '+': the first word that is not an option is the command; its own
     * options are its own. */
    while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            name = optarg;
            break;
        case 'b':
            endpoint = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            fprintf(stderr, "gpushare run: \"%s\" needs a value\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        default:
            fprintf(stderr, "gpushare run: unknown option \"%s\"\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "gpushare run: no command given\n");
        usage(stderr);
        return 2;
    }
    char *const *cmd = argv + optind;
    if (name && !gs_proto_id_valid(name, strlen(name))) {
        fprintf(stderr, "gpushare run: --name \"%s\": use 1 to %d letters, digits and \"%s\"\n",
                name, GS_PROTO_MAX_ID, GS_PROTO_ID_PUNCT);
        return 2;
    }
    if (endpoint) {
        char ep[256], err[512];
        if (gs_endpoint_normalise(endpoint, ep, sizeof ep, err, sizeof err) != 0) {
            fprintf(stderr, "gpushare run: --broker: %s\n", err);
            return 2;
        }
        setenv("GPUSHARE_BROKER", ep, 1);
    }
    char made[GS_PROTO_MAX_ID + 1];
    if (!name) {
        default_name(cmd[0], made, sizeof made);
        name = made;
    }
    /* GPUSHARE_KERNEL_ID names a notebook's kernel; a program run from a
     * notebook's terminal is not that kernel. */
    unsetenv("GPUSHARE_KERNEL_ID");
    setenv("GPUSHARE_SESSION", name, 1);

    char hook[4096];
    gs_hook_path(GS_HOOK_PATH, hook, sizeof hook);
    if (access(hook, R_OK) != 0) {
        fprintf(stderr, "gpushare run: warning: the hook %s: %s; %s runs without GPU sharing\n",
                hook, strerror(errno), cmd[0]);
    } else {
        char value[8192];
        if (gs_preload_value(hook, getenv("LD_PRELOAD"), value, sizeof value) != 0) {
            fprintf(stderr, "gpushare run: LD_PRELOAD is too long to add the hook to\n");
            return 2;
        }
        setenv("LD_PRELOAD", value, 1);
    }
    fflush(NULL);
    execvp(cmd[0], cmd);
    int e = errno;
    fprintf(stderr, "gpushare run: cannot run \"%s\": %s\n", cmd[0], strerror(e));
    return e == ENOENT ? 127 : 126;
}
