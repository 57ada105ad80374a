/*
 * hook_main.c - libgpushare-hook.so's life: lazy initialisation, the
 * environment, the release at exit, and the few non-CUDA exports.
 *
 * The library runs inside programs that may never touch a GPU, so nothing
 * happens at load time: no constructor, no thread, no CUDA call.  The first
 * interposed call runs hook_init_once() (pthread_once), which finds the real
 * driver and reads the environment; the broker connection starts only when
 * the program creates a context (hook_client_start).  The destructor gives
 * held grants back (reason exit) with a bounded wait, and never calls CUDA:
 * libcuda may already be finalised by then.
 */
#define _GNU_SOURCE
#include "config.h"
#include "gpushare_hook.h"
#include "hook_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "size.h"

HOOK_EXPORT const char gpushare_hook_version[] = PACKAGE_VERSION;

struct hook_config hook_cfg;
_Atomic int hook_init_done;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static unsigned env_uint(const char *name, unsigned dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    unsigned long x = strtoul(v, &end, 10);
    if (*end || x > 86400000UL) {
        gs_warn("ignoring %s=%s (expected %s)", name, v,
                strstr(name, "_US") ? "microseconds" : "milliseconds");
        return dflt;
    }
    return (unsigned)x;
}

#define DEFAULT_BURST_MERGE_US 100
#define DEFAULT_MAKE_ROOM_MS   30000

static void memory_env(void)
{
    const char *mode = getenv("GPUSHARE_MEMORY");
    if (mode && *mode) {
        if (strcmp(mode, "managed") == 0)
            hook_cfg.managed = 1;
        else if (strcmp(mode, "device") != 0)
            gs_warn("ignoring GPUSHARE_MEMORY=%s (expected device or managed)", mode);
    }
    const char *lim = getenv("GPUSHARE_MEMORY_LIMIT");
    if (lim && *lim) {
        uint64_t b;
        if (gs_size_parse(lim, &b) != 0 || b == 0)
            gs_warn("ignoring GPUSHARE_MEMORY_LIMIT=%s (expected bytes, with K/M/G/T: 8G)", lim);
        else
            hook_cfg.memory_limit = b;
    }
}

static void do_init(void)
{
    /* Anything the driver's constructors call back into goes straight
     * through while this thread initialises. */
    struct hook_thr *t = hook_thread_self();
    t->nest++;
    gs_log_init("gpushare-hook", GS_LOG_WARN);
    const char *dis = getenv("GPUSHARE_DISABLE");
    hook_cfg.disabled = dis && *dis && strcmp(dis, "0") != 0;
    hook_cfg.idle_release_ms = env_uint("GPUSHARE_IDLE_RELEASE_MS", 200);
    hook_cfg.burst_merge_us = env_uint("GPUSHARE_BURST_MERGE_US", DEFAULT_BURST_MERGE_US);
    const char *bursts = getenv("GPUSHARE_BURSTS");
    hook_cfg.bursts_off = bursts && strcmp(bursts, "0") == 0;
    hook_cfg.make_room_ms = env_uint("GPUSHARE_MAKE_ROOM_TIMEOUT_MS", DEFAULT_MAKE_ROOM_MS);
    memory_env();
    const char *sess = getenv("GPUSHARE_SESSION");
    snprintf(hook_cfg.session, sizeof hook_cfg.session, "%s", sess ? sess : "");
    hook_gate_init();
    hook_real_load();
    hook_fork_register();
    if (hook_cfg.disabled) {
        gs_debug("GPUSHARE_DISABLE is set: pure pass-through");
        atomic_store_explicit(&hook_gate_word, HOOK_GATE_UNGATED, memory_order_release);
    }
    atomic_store_explicit(&hook_init_done, 1, memory_order_release);
    t->nest--;
}

void hook_init_once(void)
{
    pthread_once(&init_once, do_init);
}

/* Runs after the program's own atexit handlers and destructors (the hook
 * is loaded first, so it is finalised last). */
__attribute__((destructor)) static void hook_fini(void)
{
    hook_client_stop();
}

/* ---- exports for tests and tools ---------------------------------------- */

/* Calls the hook's wrapper of ABI entry point `name` has seen, all threads
 * together; -1 when the hook does not interpose `name`. */
HOOK_EXPORT long long gpushare_hook_calls(const char *name)
{
    int idx = name ? hook_table_find_abi(name) : -1;
    return idx < 0 ? -1 : (long long)hook_thread_calls(idx);
}

/* Kernel launches (every cuLaunch* ABI variant) the hook has seen. */
HOOK_EXPORT long long gpushare_hook_launch_count(void)
{
    long long n = 0;
    for (int i = 0; i < HOOK_N; i++)
        if (strncmp(hook_table[i].abi, "cuLaunch", 8) == 0 && hook_table[i].cls == HOOK_SUBMIT)
            n += (long long)hook_thread_calls(i);
    return n;
}

/* The real libcuda's address of an interposed ABI name (NULL when libcuda
 * lacks it or the hook does not interpose it): lets tests compare what
 * cuGetProcAddress and dlsym hand out with what the driver has. */
HOOK_EXPORT void *gpushare_hook_real(const char *name)
{
    hook_init();
    int idx = name ? hook_table_find_abi(name) : -1;
    return idx < 0 ? NULL : hook_real[idx];
}

/* The kernel-burst statistics of device dev (what acquire carries):
 * 0 with p90 and last in us, -1 when no burst has been measured, and 1 (with
 * the statistics so far, if any) while a burst is under way or still being
 * measured. */
HOOK_EXPORT int gpushare_hook_bursts(int dev, long long *p90_us, long long *last_us)
{
    long long p, l;
    int busy = hook_burst_busy(dev);
    if (!hook_burst_stats(dev, &p, &l))
        return busy ? 1 : -1;
    if (p90_us)
        *p90_us = p;
    if (last_us)
        *last_us = l;
    return busy;
}

/* The gate word: 0 closed, 1 open (granted), 2 ungated. */
HOOK_EXPORT int gpushare_hook_gate(void)
{
    return atomic_load_explicit(&hook_gate_word, memory_order_acquire);
}
