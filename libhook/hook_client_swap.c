/*
 * hook_client_swap.c - the swap tier's side of the broker conversation:
 * swap_out and swap_in handed to the swap thread (hook_swap.h), its
 * `swapped` reports queued for the I/O thread, and memory brought back by
 * itself while there is no broker.
 */
#include "hook_client_swap.h"
#include "hook_client.h"
#include "hook_client_impl.h"

#include <stdio.h>

#include "endpoint.h"
#include "hook_mem.h"
#include "hook_swap.h"

#define RECOVER_WAIT_MS 1000 /* without a broker: wait this long for memory, then retry */

/* On the swap thread: the command is done; `swapped` goes out from the I/O
 * thread, and memory that is back opens the device's gate again. */
static void on_swap_done(const hook_swap_report_t *r)
{
    json_t *m = gs_msg_new(GS_MSG_SWAPPED);
    pthread_mutex_lock(&hook_gate_mu);
    struct hook_dev *d =
        r->dev >= 0 && r->dev < HOOK_MAX_DEVICES ? &hook_gate_st.dev[r->dev] : NULL;
    uint64_t movable = 0, out = 0;
    if (d) {
        hook_swap_totals(r->dev, &movable, &out);
        d->swapped = out > 0;
        hook_gate_update_locked();
        pthread_cond_broadcast(&hook_gate_cv);
    }
    if (m && d && hook_client_sh.connected && hook_client_sh.nreports < HOOK_MAX_DEVICES) {
        json_object_set_new(m, "device", json_string(d->uuid));
        json_object_set_new(m, "lease", json_integer((json_int_t)r->lease));
        json_object_set_new(m, "direction",
                            json_string(r->out == HOOK_SWAP_DROP ? "drop"
                                        : r->out                 ? "out"
                                                                 : "in"));
        json_object_set_new(m, "ok", json_boolean(r->ok));
        json_object_set_new(m, "bytes", json_integer((json_int_t)r->bytes));
        json_object_set_new(m, "elapsed_us", json_integer((json_int_t)r->elapsed_us));
        json_object_set_new(m, "resident_bytes", json_integer((json_int_t)r->left_resident));
        /* The totals as they are now: a park that follows at once must
         * not go by the last memory report, taken while it was out. */
        json_object_set_new(m, "movable_bytes", json_integer((json_int_t)movable));
        json_object_set_new(m, "swapped_bytes", json_integer((json_int_t)out));
        if (!r->ok && r->error[0])
            json_object_set_new(m, "error", json_string(r->error));
        hook_client_sh.reports[hook_client_sh.nreports++] = m;
        m = NULL;
    }
    pthread_mutex_unlock(&hook_gate_mu);
    json_decref(m);
    hook_mem_mark_all(); /* the movable and swapped bytes changed */
    hook_client_kick();
}

void hook_client_swap_on_command(const json_t *m, int out)
{
    const char *uuid = gs_msg_str(m, "device", "");
    uint64_t lease = (uint64_t)gs_msg_int(m, "lease", 0);
    unsigned wait_ms = (unsigned)gs_msg_int(m, "wait_ms", 0);
    uint64_t bytes =
        out == HOOK_SWAP_OUT ? (uint64_t)gs_msg_int(m, "bytes", 0) : 0; /* a partial park */
    char pool[128] = "";
    pthread_mutex_lock(&hook_gate_mu);
    struct hook_dev *d = hook_gate_dev_by_uuid_locked(uuid);
    int dev = d ? (int)(d - hook_gate_st.dev) : -1;
    const char *refuse =
        !d                       ? "this process does not use that GPU"
        : !hook_swap_available() ? "the swap tier is off in this process"
        : out == HOOK_SWAP_OUT && (d->state == DS_GRANTED || d->state == DS_DRAINING)
            ? "the process still holds the GPU"
            : NULL;
    if (!refuse && out == HOOK_SWAP_OUT)
        d->swapped = 1; /* closed from now: nothing may touch the memory as it leaves */
    hook_gate_update_locked();
    pthread_mutex_unlock(&hook_gate_mu);
    if (refuse) {
        hook_swap_report_t r = {.dev = dev, .out = out, .lease = lease};
        snprintf(r.error, sizeof r.error, "%s", refuse);
        if (dev >= 0)
            on_swap_done(&r);
        return;
    }
    gs_endpoint_pool_path(hook_client_sh.endpoint, pool, sizeof pool);
    hook_swap_command(dev, out, lease, wait_ms, bytes, pool, on_swap_done);
}

/* The gate opens for a device once its memory is back (on the swap
 * thread). */
static void swapped_back(void)
{
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        if (hook_gate_st.dev[i].swapped && !hook_swap_parked(i))
            hook_gate_st.dev[i].swapped = 0;
    hook_gate_update_locked();
    pthread_cond_broadcast(&hook_gate_cv);
    pthread_mutex_unlock(&hook_gate_mu);
}

/* Without a broker, memory in host memory comes back by itself (the
 * mappings of the broker's chunks stay valid in this process).  Not on
 * this thread: the driver may block it (a process a dead broker left
 * locked), and this thread must reach the next broker, which unlocks it. */
void hook_client_swap_recover(void)
{
    int any = 0;
    pthread_mutex_lock(&hook_gate_mu);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        any |= hook_gate_st.dev[i].touched && hook_gate_st.dev[i].swapped;
    pthread_mutex_unlock(&hook_gate_mu);
    if (any)
        hook_swap_recover(RECOVER_WAIT_MS, swapped_back);
}
