/*
 * hook_restore.c - starting, stopping and reaping gpushare-restore (see
 * hook_restore.h).  State of the I/O thread only, no lock.
 */
#define _GNU_SOURCE
#include "hook_restore.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hook_config.h"
#include "hook_gate.h"
#include "hook_mem.h"
#include "log.h"
#include "proc_alive.h"

extern char **environ;

static struct {
    pid_t pid;    /* the helper until it is reaped, 0: none */
    int stopping; /* SIGTERM sent */
    int again;    /* the broker was lost again before the stopped one ended */
    int missing_said;
} rs;

/* The process' environment without what would hook the helper or hide
 * GPUs from it: no LD_PRELOAD (the hook, or anything else interposing
 * the driver), GPUSHARE_DISABLE=1 should the hook come in some other way
 * (/etc/ld.so.preload), no CUDA_VISIBLE_DEVICES (the checkpoint API needs
 * no device of its own; like the broker, the helper sees every GPU).
 * Read on this thread while the program may call setenv: as racy as any
 * getenv in a library, and only when the broker is lost. */
static char **helper_env(void)
{
    static const char *const drop[] = {"LD_PRELOAD=", "GPUSHARE_DISABLE=", "CUDA_VISIBLE_DEVICES="};
    size_t n = 0;
    while (environ && environ[n])
        n++;
    char **env = calloc(n + 2, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int keep = 1;
        for (size_t d = 0; d < sizeof drop / sizeof drop[0]; d++)
            keep &= strncmp(environ[i], drop[d], strlen(drop[d])) != 0;
        if (keep)
            env[k++] = environ[i];
    }
    env[k++] = (char *)"GPUSHARE_DISABLE=1";
    env[k] = NULL;
    return env;
}

/* posix_spawn (no atfork handlers run, nothing of the hook is copied):
 * stdin and stdout on /dev/null, stderr the process' own (the notebook's
 * log), no other descriptor (a pipe of the program's must not stay open
 * for as long as the helper lives), every signal unblocked (this thread
 * blocks them all) and at its default, in a process group of its own (a
 * Ctrl-C meant for the program must not end it half-way). */
static int spawn_helper(const char *path, char **argv, char **envp, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, dflt;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
#endif
    posix_spawnattr_init(&at);
    sigemptyset(&none);
    sigemptyset(&dflt);
    static const int sigs[] = {SIGTERM, SIGINT,  SIGHUP,  SIGQUIT, SIGPIPE,
                               SIGCHLD, SIGALRM, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaddset(&dflt, sigs[i]); /* an ignored signal would stay ignored through exec */
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dflt);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
    int r = posix_spawn(pid, path, &fa, &at, argv, envp);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    return r;
}

static void start_helper(void)
{
    const char *path = hook_cfg.restore_helper;
    if (!path[0]) {
        gs_debug("GPUSHARE_RESTORE_HELPER=off: no restore helper");
        return;
    }
    if (access(path, X_OK) != 0) {
        if (!rs.missing_said)
            gs_warn("cannot start the restore helper %s (%s): should the broker have left this "
                    "process on the checkpoint tier, it stays frozen until a broker is back",
                    path, strerror(errno));
        rs.missing_said = 1;
        return;
    }
    pid_t self = getpid();
    unsigned long long start = gs_proc_start(self);
    if (!start) {
        gs_warn("cannot read this process' start time (/proc/%d/stat): no restore helper",
                (int)self);
        return;
    }
    char pidarg[24], startarg[32];
    snprintf(pidarg, sizeof pidarg, "%d", (int)self);
    snprintf(startarg, sizeof startarg, "%llu", start);
    /* What this process holds on each GPU: the helper restores only once
     * that much is free there (a restore that runs out of GPU memory
     * leaves the process checkpointed for good). */
    char gpuargs[HOOK_MAX_DEVICES][HOOK_UUID_LEN + 32];
    char *argv[5 + 2 * HOOK_MAX_DEVICES + 1] = {(char *)path, (char *)"--pid", pidarg,
                                                (char *)"--start", startarg};
    int argc = 5;
    char uuids[HOOK_MAX_DEVICES][HOOK_UUID_LEN];
    pthread_mutex_lock(&hook_gate_mu);
    for (int d = 0; d < HOOK_MAX_DEVICES; d++)
        snprintf(uuids[d], sizeof uuids[d], "%s",
                 hook_gate_st.dev[d].touched ? hook_gate_st.dev[d].uuid : "");
    pthread_mutex_unlock(&hook_gate_mu);
    for (int d = 0; d < HOOK_MAX_DEVICES; d++) {
        uint64_t used = 0, managed = 0, peak = 0;
        if (!uuids[d][0] || hook_mem_footprint(d, &used, &managed, &peak) != 0 || used == 0)
            continue;
        snprintf(gpuargs[d], sizeof gpuargs[d], "%.47s=%llu", uuids[d], (unsigned long long)used);
        argv[argc++] = (char *)"--gpu";
        argv[argc++] = gpuargs[d];
    }
    argv[argc] = NULL;
    char **envp = helper_env();
    pid_t pid = 0;
    int r = envp ? spawn_helper(path, argv, envp, &pid) : ENOMEM;
    free(envp);
    if (r != 0) {
        gs_warn("cannot start the restore helper %s: %s", path, strerror(r));
        return;
    }
    rs.pid = pid;
    rs.stopping = 0;
    gs_info("the broker is gone: started %s (pid %d) to bring this process back should it be on "
            "the checkpoint tier",
            path, (int)pid);
}

void hook_restore_broker_lost(void)
{
    if (!rs.pid)
        start_helper();
    else if (rs.stopping)
        rs.again = 1; /* a new one once the stopped one has ended */
}

void hook_restore_stop(void)
{
    rs.again = 0;
    if (rs.pid && !rs.stopping) {
        kill(rs.pid, SIGTERM); /* not yet reaped: the pid is still the helper's */
        rs.stopping = 1;
        gs_debug("restore helper (pid %d) asked to stop", (int)rs.pid);
    }
}

void hook_restore_reap(void)
{
    if (!rs.pid)
        return;
    int status = 0;
    pid_t r = waitpid(rs.pid, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR))
        return;
    /* ECHILD: the program reaped it (waitpid(-1) in a SIGCHLD handler, or
     * SIGCHLD ignored): it is gone all the same. */
    if (r == rs.pid)
        gs_debug("restore helper (pid %d) ended (%s %d)", (int)rs.pid,
                 WIFEXITED(status) ? "status" : "signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    rs.pid = 0;
    rs.stopping = 0;
    if (rs.again) {
        rs.again = 0;
        start_helper();
    }
}

void hook_restore_atfork_child(void)
{
    memset(&rs, 0, sizeof rs);
}
