/*
 * hook_exports.c - what the library exports besides the CUDA ABI names and
 * dlsym (gpushare_hook.h): its version and introspection for tests and
 * tools.
 */
#include "config.h"
#include "gpushare_hook.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_assert.h"
#include "hook_burst.h"
#include "hook_clock.h"
#include "hook_cuda.h"
#include "hook_drain.h"
#include "hook_gate.h"
#include "hook_init.h"
#include "hook_mem.h"
#include "hook_real.h"
#include "hook_swap.h"
#include "hook_thread.h"
#include "hook_wait.h"

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

/* ---- the notebook's wait line (gpushare_ipython) ------------------------- */

static double seconds(uint64_t ns)
{
    return (double)ns / 1e9;
}

/* One device's entry (hook_gate_mu held; the swap tier's lock is a leaf). */
static json_t *wait_entry_locked(const struct hook_dev *d, int dev, uint64_t now)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    json_t *e = json_pack("{s:i, s:s, s:f, s:I}", "gpu", dev, "uuid", d->uuid, "waited_s",
                          seconds(d->waited_ns), "waits", (json_int_t)d->waits);
    if (!e)
        return NULL;
    uint64_t done = 0, total = 0;
    const char *why = "none";
    if (d->wait_begin_ns) {
        if (d->room_waiters > 0)
            why = "room";
        else if (d->swapped)
            why = hook_swap_progress(dev, &done, &total) ? "swap_in" : "parked";
        else
            why = "gpu";
        json_object_set_new(e, "for_s", json_real(seconds(now - d->wait_begin_ns)));
    }
    json_object_set_new(e, "state", json_string(why));
    if (!strcmp(why, "gpu")) {
        if (d->wait_holder[0])
            json_object_set_new(e, "holder", json_string(d->wait_holder));
        if (d->wait_info[0])
            json_object_set_new(e, "info", json_string(d->wait_info));
        if (d->wait_left_ns)
            json_object_set_new(
                e, "left_s", json_real(d->wait_left_ns > now ? seconds(d->wait_left_ns - now) : 0));
    } else if (!strcmp(why, "swap_in")) {
        json_object_set_new(e, "done_bytes", json_integer((json_int_t)done));
        json_object_set_new(e, "total_bytes", json_integer((json_int_t)total));
    } else if (!strcmp(why, "room")) {
        json_object_set_new(e, "room_bytes", json_integer((json_int_t)d->room_bytes));
        if (d->room_info[0])
            json_object_set_new(e, "info", json_string(d->room_info));
    }
    if (d->room_error[0]) /* the last allocation that waited for room failed, why */
        json_object_set_new(e, "room_error", json_string(d->room_error));
    return e;
}

/* What the process waits for now, per GPU it has used, as JSON (the
 * layout is in gpushare_hook.h), written into buf like snprintf: returns
 * the length of the whole text (buf holds it when that is below len), or
 * -1 when it cannot be made. */
HOOK_EXPORT int gpushare_hook_wait_state(char *buf, size_t len)
{
    json_t *devs = json_array();
    if (!devs)
        return -1;
    int waiting = 0;
    uint64_t now = hook_clock_ns();
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++) {
        const struct hook_dev *d = &hook_gate_st.dev[i];
        if (!d->touched)
            continue;
        waiting |= d->wait_begin_ns != 0;
        json_array_append_new(devs, wait_entry_locked(d, i, now));
    }
    int ungated = hook_gate_st.client == CS_UNGATED || hook_gate_st.client == CS_NONE;
    pthread_mutex_unlock(&hook_gate_mu);
    json_t *st = json_pack("{s:b, s:b, s:b, s:o}", "waiting", waiting, "broker", !ungated, "quiet",
                           atomic_load(&hook_wait_quiet) != 0, "devices", devs);
    char *text = st ? json_dumps(st, JSON_COMPACT) : NULL;
    json_decref(st);
    if (!text)
        return -1;
    int n = snprintf(buf, len, "%s", text);
    free(text);
    return n;
}

/* Whether the hook prints its own notice on stderr when a wait passes a
 * second (1, the default) or leaves waits to someone who shows them (0);
 * returns the previous setting. */
HOOK_EXPORT int gpushare_hook_wait_notices(int on)
{
    return !hook_wait_set_quiet(!on);
}

/* Gives every grant this process holds back now, as an idle release does
 * (its next work asks again): returns how many GPUs it gives back. */
HOOK_EXPORT int gpushare_hook_release(void)
{
    int n = 0;
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        if (hook_gate_st.dev[i].touched && hook_gate_st.dev[i].state == DS_GRANTED) {
            hook_drain_start_locked(i, DRAIN_IDLE, 1);
            n++;
        }
    pthread_mutex_unlock(&hook_gate_mu);
    return n;
}

/* The gate bypassed (1) or in force (0): returns the previous setting.  For
 * an in-process A/B of the hook's cost; while on, this process' work is not
 * gated and a revoke does not wait for it (gpushare_hook.h). */
HOOK_EXPORT int gpushare_hook_passthrough(int on)
{
    pthread_mutex_lock(&hook_gate_mu);
    int was = hook_gate_passthrough;
    hook_gate_passthrough = on ? 1 : 0;
    hook_gate_update_locked();
    pthread_mutex_unlock(&hook_gate_mu);
    return was;
}
