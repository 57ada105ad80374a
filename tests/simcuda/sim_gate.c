/*
 * sim_gate.c - the API gate that cuCheckpointProcessLock closes.  Every
 * gated entry point counts itself active while it runs and waits at entry
 * while the gate is closed.  A call that blocks in a synchronisation stops
 * counting as active while it waits (so it cannot hold a lock off) and
 * re-enters the gate before returning, so it never returns into user code
 * while the process is locked or checkpointed.
 */
#include "sim_internal.h"

static __thread int t_gate_depth; /* >0 while this thread is inside a gated call */

CUresult sim_enter(void)
{
    if (!atomic_load(&sim_g.initialised))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (t_gate_depth++ > 0)
        return CUDA_SUCCESS; /* nested (a host function calling back into us) */
    sim_lock();
    while (sim_g.gate_closed)
        sim_cond_wait();
    sim_g.active_calls++;
    sim_unlock();
    return CUDA_SUCCESS;
}

void sim_leave(void)
{
    if (--t_gate_depth > 0)
        return;
    sim_lock();
    if (--sim_g.active_calls == 0)
        sim_broadcast();
    sim_unlock();
}

void sim_wait_locked(int (*pred)(void *), void *arg)
{
    if (pred(arg))
        return;
    int gated = t_gate_depth > 0;
    if (gated && --sim_g.active_calls == 0)
        sim_broadcast();
    while (!pred(arg))
        sim_cond_wait();
    if (gated) {
        while (sim_g.gate_closed)
            sim_cond_wait();
        sim_g.active_calls++;
    }
}
