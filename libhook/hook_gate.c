/*
 * hook_gate.c - the gate: may this process submit work to this GPU now?
 *
 * The fast path (hook_submit.h) is one acquire load of hook_gate_word,
 * which is OPEN only while every device the process has touched is
 * granted.  This file keeps that word true to the table of devices; the
 * submission slow path (hook_submit.c) waits on the table, the broker
 * client (hook_client_recv.c) fills it from grants and revokes, and the drains
 * (hook_drain.c) give devices back.
 */
#include "hook_gate.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hook_config.h"
#include "gs_assert.h"

struct hook_line_int hook_gate_word = {HOOK_GATE_CLOSED};
struct hook_line_u64 hook_gate_epoch = {1};
struct hook_line_int hook_gate_activity;

pthread_mutex_t hook_gate_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t hook_gate_cv;
struct hook_gate_state hook_gate_st;
int hook_gate_gang;
int hook_gate_passthrough;
atomic_int hook_gate_frozen;
atomic_int hook_gate_probing;
static pthread_once_t cv_once = PTHREAD_ONCE_INIT;

static void cv_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&hook_gate_cv, &a);
    pthread_condattr_destroy(&a);
}

/* hook_gate_cv waits with CLOCK_MONOTONIC deadlines; hook_init_once()
 * calls this, so it is ready before anyone can wait. */
void hook_gate_init(void)
{
    pthread_once(&cv_once, cv_init);
}

void hook_gate_update_locked(void)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    int w, swapped = 0;
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        swapped |= hook_gate_st.dev[i].touched && hook_gate_st.dev[i].swapped;
    if (hook_cfg.disabled || (hook_gate_st.client == CS_UNGATED && !swapped))
        w = HOOK_GATE_UNGATED;
    else if (hook_gate_passthrough && !swapped)
        w = HOOK_GATE_PASS;
    else if (hook_gate_st.client == CS_UNGATED)
        w = HOOK_GATE_CLOSED; /* until the memory is back */
    else {
        w = HOOK_GATE_OPEN;
        for (int i = 0; i < HOOK_MAX_DEVICES; i++)
            if (hook_gate_st.dev[i].touched && hook_gate_st.dev[i].state != DS_GRANTED)
                w = HOOK_GATE_CLOSED;
    }
    atomic_store_explicit(&hook_gate_word.v, w, memory_order_seq_cst);
}

struct hook_dev *hook_gate_touch_locked(int dev)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    if (dev < 0 || dev >= HOOK_MAX_DEVICES)
        return NULL;
    struct hook_dev *d = &hook_gate_st.dev[dev];
    if (!d->touched) {
        d->touched = 1;
        d->state = DS_IDLE;
        if (!d->uuid[0])
            snprintf(d->uuid, sizeof d->uuid, "GPU-unknown-%d", dev);
        if (hook_gate_gang) /* the whole gang, so that the gate waits for all of it */
            for (int i = 0; i < hook_gate_st.ndev && i < HOOK_MAX_DEVICES; i++)
                if (i != dev && hook_gate_st.dev[i].uuid[0])
                    hook_gate_touch_locked(i);
        hook_gate_update_locked();
    }
    return d;
}

struct hook_dev *hook_gate_dev_by_uuid_locked(const char *uuid)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    for (int i = 0; i < HOOK_MAX_DEVICES; i++)
        if (hook_gate_st.dev[i].touched && strcmp(hook_gate_st.dev[i].uuid, uuid) == 0)
            return &hook_gate_st.dev[i];
    return NULL;
}

/* ---- fork --------------------------------------------------------------- */

void hook_gate_atfork_prepare(void)
{
    pthread_mutex_lock(&hook_gate_mu);
}

void hook_gate_atfork_parent(void)
{
    pthread_mutex_unlock(&hook_gate_mu);
}

/* The child starts with no devices and no grants; the gate is closed so
 * that its first submission goes through the slow path, which
 * re-initialises lazily. */
void hook_gate_atfork_child(void)
{
    pthread_mutex_init(&hook_gate_mu, NULL);
    cv_init();
    memset(&hook_gate_st, 0, sizeof hook_gate_st);
    atomic_store(&hook_gate_activity.v, 0);
    atomic_fetch_add(&hook_gate_epoch.v, 1);
    atomic_store(&hook_gate_word.v, hook_cfg.disabled ? HOOK_GATE_UNGATED : HOOK_GATE_CLOSED);
}
