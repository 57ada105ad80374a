/*
 * restore_main.c - gpushare-restore: brings one process back from the
 * checkpoint tier when no broker is there to do it.
 *
 * A process the broker locked and checkpointed cannot restore itself: its
 * CUDA calls block inside the locked driver.  When its hook loses the
 * broker (killed, crashed), it starts this helper for its own pid
 * (libhook/hook_restore.c), which restores and unlocks it with the
 * driver's checkpoint API, waiting for GPU memory while there is no room,
 * and stops when the hook sends SIGTERM (a broker is back and adopts what
 * is parked).  It writes only to stderr: the process' own, the notebook's
 * log.  Not linked with ZeroMQ or czmq: it only needs the driver.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gpu_free.h"
#include "log.h"
#include "proc_alive.h"
#include "restore_args.h"
#include "restore_cuda.h"
#include "restore_loop.h"

static volatile sig_atomic_t stop_flag;
static const gs_restore_args_t *ctx_args; /* has_room's: ops.ctx is the driver's */
static sigset_t stop_sigs, unblocked;     /* SIGTERM and SIGINT; the mask without them */

static void on_stop(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static int alive(void *ctx, int pid, unsigned long long start)
{
    (void)ctx;
    return gs_proc_alive(pid, start);
}

/* Pending counts: the signals stay blocked outside naps. */
static int stop_requested(void *ctx)
{
    (void)ctx;
    sigset_t pending;
    if (stop_flag)
        return 1;
    sigpending(&pending);
    return sigismember(&pending, SIGTERM) || sigismember(&pending, SIGINT);
}

/* The stop signals are let in only here, atomically with the wait: they
 * end the nap at once, and never interrupt a driver call (a restore of
 * many GB must not be cut in the middle by a signal). */
static void nap_ms(void *ctx, unsigned ms)
{
    if (stop_requested(ctx))
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    ppoll(NULL, 0, &ts, &unblocked);
}

static uint64_t now_ms(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    /* A closing terminal must not end it while the process it brings
     * back runs on (nohup'd). */
    signal(SIGHUP, SIG_IGN);
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGTERM);
    sigaddset(&stop_sigs, SIGINT);
    sigprocmask(SIG_BLOCK, &stop_sigs, &unblocked);
    sigdelset(&unblocked, SIGTERM);
    sigdelset(&unblocked, SIGINT);
}

/* What the process held on each GPU is free there now, by the driver's
 * count (gpu_free.h), with a sixty-fourth of the GPU (1 GiB at most) for
 * its contexts; a GPU NVML does not know is taken to have room. */
static int has_room(void *ctx)
{
    const gs_restore_args_t *a = ctx_args;
    (void)ctx;
    for (int i = 0; i < a->ngpus; i++) {
        uint64_t free_b, total;
        if (gs_gpu_free_read(a->gpu[i].uuid, &free_b, &total) != 0)
            continue;
        if (free_b < a->gpu[i].bytes + gs_gpu_free_restore_margin(total))
            return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    gs_log_init("gpushare-restore", GS_LOG_WARN);
    gs_restore_args_t args;
    char why[512];
    if (gs_restore_args_parse(argc, argv, &args, why, sizeof why) != 0) {
        gs_error("%s (usage: gpushare-restore --pid PID --start STARTTIME; --help says more)", why);
        return GS_RST_EXIT_USAGE;
    }
    if (args.help) {
        fputs(GS_RESTORE_USAGE, stdout);
        return 0;
    }
    signals();
    if (!gs_proc_alive(args.pid, args.start)) {
        gs_error("pid %d is not running, or is not the process that started at %llu: nothing to "
                 "bring back",
                 args.pid, args.start);
        return GS_RST_EXIT_NOT_DONE;
    }
    ctx_args = &args;
    gs_restore_ops_t ops = {.alive = alive,
                            .stop = stop_requested,
                            .nap_ms = nap_ms,
                            .now_ms = now_ms,
                            .has_room = has_room};
    int loaded = gs_restore_cuda_load(&ops, why, sizeof why);
    if (loaded > 0) {
        gs_info("%s: pid %d cannot be on the checkpoint tier", why, args.pid);
        return GS_RST_EXIT_RUNS;
    }
    if (loaded < 0) {
        gs_error("cannot bring pid %d back from the checkpoint tier: %s", args.pid, why);
        return GS_RST_EXIT_FAILED;
    }
    gs_restore_limits_t lim = GS_RESTORE_LIMITS_DEFAULT;
    return gs_restore_run(&ops, args.pid, args.start, &lim);
}
