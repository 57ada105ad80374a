/*
 * main.c - gpushare-launch: run a kernel command with the hook preloaded and
 * its cells watched.
 *
 * It execs the command in place, so the kernel keeps the pid, the process
 * group and the signals the notebook server knows, and its exit status is
 * the kernel's.  Just before, it forks the cell watcher (watcher.c), which
 * becomes the kernel's child and dies with it.  The kernel's environment
 * gets GPUSHARE_SESSION = the kernel id, which is the session id the
 * broker's `register` uses, so the kernel's hooks join the notebook's
 * session without waiting for the broker: nothing here delays the kernel,
 * and a missing broker costs one warning line in the kernel's log.
 *
 * A connection file that cannot be read is reported with the file and the
 * field, and the kernel starts anyway, unwatched (ipykernel decides what it
 * makes of the file; a notebook that works without gpushare keeps working);
 * --strict makes it an error (exit status 2) instead.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "connection_file.h"
#include "endpoint.h"
#include "hook_path.h"
#include "log.h"
#include "preload.h"
#include "watcher.h"

#ifndef GS_HOOK_PATH
#define GS_HOOK_PATH "/usr/local/lib/libgpushare-hook.so"
#endif

static void usage(FILE *out)
{
    fprintf(out, "Usage: gpushare-launch [OPTIONS] -- COMMAND [ARGS...]\n"
                 "Run COMMAND (a Jupyter kernel) sharing the GPU through gpushare.\n"
                 "\n"
                 "  --broker ENDPOINT        the broker (ipc://PATH, a path, or tcp://...)\n"
                 "  --no-hook                do not preload libgpushare-hook.so\n"
                 "  --no-watch               do not watch the kernel's cells\n"
                 "  --connection-file FILE   the kernel's connection file (default: the\n"
                 "                           -f FILE argument of COMMAND)\n"
                 "  --kernel-id ID           the Jupyter kernel id (default: GPUSHARE_KERNEL_ID,\n"
                 "                           else the connection file's name kernel-ID.json)\n"
                 "  --pythonpath DIR         append DIR to the kernel's PYTHONPATH (where this\n"
                 "                           install put gpushare_ipython; the kernelspec says)\n"
                 "  --strict                 refuse to start the kernel when its cells cannot be\n"
                 "                           watched (bad connection file, no kernel id)\n"
                 "  -h, --help, -V, --version\n");
}

/* The user the kernel runs for, for display in `gpushare status`: the
 * provisioner's GPUSHARE_USER, JupyterHub's user, else the uid's name. */
static const char *user_name(char *buf, size_t len)
{
    static const char *const vars[] = {"GPUSHARE_USER", "JUPYTERHUB_USER"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return v;
    }
    struct passwd *pw = getpwuid(getuid());
    if (pw && pw->pw_name && *pw->pw_name)
        return pw->pw_name;
    snprintf(buf, len, "uid %u", (unsigned)getuid());
    return buf;
}

/* DIR after the user's own PYTHONPATH entries, unless it is one of them:
 * kernel.json's env would replace the variable, so an install outside the
 * python's own site-packages adds its directory here, at run time. */
static int append_pythonpath(const char *dir)
{
    const char *old = getenv("PYTHONPATH");
    if (!old || !*old)
        return setenv("PYTHONPATH", dir, 1);
    size_t dl = strlen(dir);
    for (const char *p = old; p;) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == dl && strncmp(p, dir, n) == 0)
            return 0;
        p = end ? end + 1 : NULL;
    }
    size_t len = strlen(old) + dl + 2;
    char *value = malloc(len);
    if (!value)
        return -1;
    snprintf(value, len, "%s:%s", old, dir);
    int rc = setenv("PYTHONPATH", value, 1);
    free(value);
    return rc;
}

int main(int argc, char **argv)
{
    const char *broker = NULL, *conn_path = NULL, *kernel_id_opt = NULL, *pythonpath = NULL;
    int no_hook = 0, no_watch = 0, strict = 0;
    static const struct option longopts[] = {
        {"broker", required_argument, 0, 'b'},     {"no-hook", no_argument, 0, 'n'},
        {"no-watch", no_argument, 0, 'W'},         {"connection-file", required_argument, 0, 'f'},
        {"kernel-id", required_argument, 0, 'k'},  {"strict", no_argument, 0, 's'},
        {"pythonpath", required_argument, 0, 'p'}, {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},          {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "+hV", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            broker = optarg;
            break;
        case 'n':
            no_hook = 1;
            break;
        case 'W':
            no_watch = 1;
            break;
        case 'f':
            conn_path = optarg;
            break;
        case 'k':
            kernel_id_opt = optarg;
            break;
        case 's':
            strict = 1;
            break;
        case 'p':
            if (optarg[0] != '/' || strchr(optarg, ':')) {
                fprintf(stderr,
                        "gpushare-launch: --pythonpath \"%s\": an absolute directory "
                        "without ':'\n",
                        optarg);
                return 2;
            }
            pythonpath = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("gpushare-launch %s\n", PACKAGE_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "gpushare-launch: no command given\n");
        usage(stderr);
        return 2;
    }
    gs_log_init("gpushare-launch", GS_LOG_WARN);
    char *const *cmd = argv + optind;
    char err[512], ep[256];
    if (broker) {
        if (gs_endpoint_normalise(broker, ep, sizeof ep, err, sizeof err) != 0) {
            fprintf(stderr, "gpushare-launch: --broker: %s\n", err);
            return 2;
        }
        setenv("GPUSHARE_BROKER", ep, 1);
    }
    if (pythonpath && append_pythonpath(pythonpath) != 0) {
        fprintf(stderr, "gpushare-launch: cannot set PYTHONPATH: %s\n", strerror(errno));
        return 2;
    }
    if (!no_hook) {
        char hook[4096];
        gs_hook_path(GS_HOOK_PATH, hook, sizeof hook);
        char value[8192];
        if (gs_preload_value(hook, getenv("LD_PRELOAD"), value, sizeof value) != 0) {
            fprintf(stderr, "gpushare-launch: LD_PRELOAD is too long\n");
            return 2;
        }
        setenv("LD_PRELOAD", value, 1);
    }

    /* The kernel id, which is also the session id. */
    if (!conn_path)
        conn_path = gs_conn_file_from_argv(cmd);
    char kernel_id[160] = "";
    const char *id_source = NULL;
    const char *env_id = getenv("GPUSHARE_KERNEL_ID");
    int env_id_used = 0;
    if (kernel_id_opt) {
        snprintf(kernel_id, sizeof kernel_id, "%s", kernel_id_opt);
        id_source = "--kernel-id";
    } else if (env_id && *env_id) {
        snprintf(kernel_id, sizeof kernel_id, "%s", env_id);
        id_source = "GPUSHARE_KERNEL_ID";
        env_id_used = 1;
    } else if (conn_path &&
               gs_conn_kernel_id_from_path(conn_path, kernel_id, sizeof kernel_id) == 0)
        id_source = "the connection file's name";
    if (id_source && !gs_conn_valid_kernel_id(kernel_id)) {
        fprintf(stderr,
                "gpushare-launch: the kernel id from %s is not 1 to 128 of [A-Za-z0-9._-]\n",
                id_source);
        if (strict || kernel_id_opt)
            return 2;
        kernel_id[0] = '\0';
    }

    /* What the watcher needs, read before the fork so that a problem is one
     * clear line and no watcher at all. */
    static gs_conn_info_t conn;
    int watch = !no_watch && conn_path && kernel_id[0];
    if (!no_watch && conn_path && !kernel_id[0]) {
        fprintf(stderr, "gpushare-launch: cannot tell kernel's id (set GPUSHARE_KERNEL_ID or "
                        "--kernel-id); its cells are not watched\n");
        if (strict)
            return 2;
    }
    if (watch && gs_conn_read(conn_path, &conn, err, sizeof err) != 0) {
        fprintf(stderr, "gpushare-launch: %s; %s\n", err,
                strict ? "not starting the kernel (--strict)"
                       : "the kernel starts without its cells watched");
        if (strict)
            return 2;
        watch = 0;
    }
    if (!no_watch && !conn_path && strict) {
        fprintf(stderr, "gpushare-launch: COMMAND names no connection file (-f FILE)\n");
        return 2;
    }
    if (kernel_id[0]) {
        setenv("GPUSHARE_KERNEL_ID", kernel_id, 1);
        setenv("GPUSHARE_SESSION", kernel_id, 1);
    }

    if (watch) {
        char ubuf[32];
        const char *user = user_name(ubuf, sizeof ubuf);
        const char *nb = getenv("JPY_SESSION_NAME");
        pid_t me = getpid(), parent = getppid();
        int pipefd[2] = {-1, -1};
        if (pipe2(pipefd, O_CLOEXEC) != 0)
            pipefd[0] = pipefd[1] = -1;
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            if (pipefd[1] >= 0)
                close(pipefd[1]);
            gs_watcher_args_t wa = {.conn = &conn,
                                    .conn_path = conn_path,
                                    .kernel_id = kernel_id,
                                    .user = user,
                                    .notebook = nb && *nb ? nb : NULL,
                                    .server_pid = parent,
                                    /* JPY_SESSION_NAME (jupyter_server 2)
                                     * names it; the provisioner, which
                                     * sets GPUSHARE_KERNEL_ID, finds it in
                                     * its server's table; else: look. */
                                    .find_notebook = !(nb && *nb) && !env_id_used,
                                    .kernel_pid = me,
                                    .exec_fd = pipefd[0]};
            gs_watcher_main(&wa);
        }
        if (pid < 0)
            fprintf(stderr, "gpushare-launch: cannot fork the cell watcher: %s\n", strerror(errno));
        if (pipefd[0] >= 0)
            close(pipefd[0]);
        /* pipefd[1] closes at exec: the watcher's signal to start. */
        gs_conn_clear(&conn);
        execvp(cmd[0], cmd);
        int e = errno;
        if (pipefd[1] >= 0) { /* exec failed: the watcher leaves quietly */
            ssize_t w = write(pipefd[1], "x", 1);
            (void)w;
        }
        errno = e;
    } else {
        execvp(cmd[0], cmd);
    }
    int e = errno;
    fprintf(stderr, "gpushare-launch: cannot run \"%s\": %s\n", cmd[0], strerror(e));
    return e == ENOENT ? 127 : 126;
}
