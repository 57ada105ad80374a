/*
 * hook_wait.c - the bookkeeping of waits per device (hook_wait.h).
 */
#include "hook_wait.h"

#include <pthread.h>

#include "hook_clock.h"
#include "gs_assert.h"

atomic_int hook_wait_quiet;

static void begin_locked(struct hook_dev *d)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    if (d->gate_waiters + d->room_waiters == 1)
        d->wait_begin_ns = hook_clock_ns();
}

static void end_locked(struct hook_dev *d)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    if (d->gate_waiters + d->room_waiters > 0 || !d->wait_begin_ns)
        return;
    d->waited_ns += hook_clock_ns() - d->wait_begin_ns;
    d->waits++;
    d->wait_begin_ns = 0;
}

void hook_wait_gate_enter_locked(struct hook_dev *d)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    d->gate_waiters++;
    begin_locked(d);
}

void hook_wait_gate_leave_locked(struct hook_dev *d)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    if (d->gate_waiters > 0)
        d->gate_waiters--;
    end_locked(d);
}

void hook_wait_room_enter_locked(struct hook_dev *d, uint64_t bytes)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    d->room_waiters++;
    d->room_bytes = bytes;
    d->room_info[0] = 0;
    begin_locked(d);
}

void hook_wait_room_leave_locked(struct hook_dev *d)
{
    GS_ASSERT_HELD(&hook_gate_mu);
    if (d->room_waiters > 0)
        d->room_waiters--;
    end_locked(d);
}

static void child(void)
{
    atomic_store(&hook_wait_quiet, 0);
}

static void register_child(void)
{
    pthread_atfork(NULL, NULL, child);
}

int hook_wait_set_quiet(int quiet)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_child);
    return atomic_exchange(&hook_wait_quiet, quiet ? 1 : 0);
}
