/*
 * hook_exports.c - what the library exports besides the CUDA ABI names and
 * dlsym (gpushare_hook.h): its version and introspection for tests and
 * tools.
 */
#include "config.h"
#include "gpushare_hook.h"

#include <string.h>

#include "hook_burst.h"
#include "hook_cuda.h"
#include "hook_gate.h"
#include "hook_init.h"
#include "hook_mem.h"
#include "hook_real.h"
#include "hook_thread.h"

HOOK_EXPORT const char gpushare_hook_version[] = PACKAGE_VERSION;

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
    return atomic_load_explicit(&hook_gate_word.v, memory_order_acquire);
}

/* For tests and tools: dev's footprint as the hook counts it. */
HOOK_EXPORT int gpushare_hook_memory(int dev, unsigned long long *used, unsigned long long *managed,
                                     unsigned long long *peak)
{
    uint64_t u, m, p;
    if (hook_mem_footprint(dev, &u, &m, &p) != 0)
        return -1;
    if (used)
        *used = u;
    if (managed)
        *managed = m;
    if (peak)
        *peak = p;
    return 0;
}
