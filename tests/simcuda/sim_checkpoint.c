/*
 * sim_checkpoint.c - the CUDA checkpoint API, acting on another process.
 * Every sim process runs a control thread (started by cuInit; its tid is
 * the "restore thread") that waits on the segment's ctl_cv for requests in
 * its mailbox of the process table.  The caller (e.g. the broker) posts a
 * request and waits for the answer with a predicate loop on the same
 * condvar, noticing if the target dies.  The target does the work:
 *   lock:       close the API gate, wait for active calls and queued work,
 *               LOCKED (or CUDA_ERROR_TIMEOUT and the gate reopens);
 *   checkpoint: park device memory in host memory, give the capacity back,
 *               CHECKPOINTED (managed memory: CUDA_ERROR_NOT_SUPPORTED);
 *               the image is charged to the host's memory, and one that
 *               does not fit gets the target killed (sim_host.c);
 *   restore:    take the capacity again (or CUDA_ERROR_OUT_OF_MEMORY,
 *               after which, as on the H100 with driver 580, every restore
 *               fails with CUDA_ERROR_OPERATING_SYSTEM and the process stays
 *               CHECKPOINTED for good: tests/gpu/restore_oom_probe.py),
 *               map the memory back at the same addresses, LOCKED; with
 *               GPU pairs, on the new GPUs (pairs_map: every GPU of the
 *               machine, as the real driver wants);
 *   unlock:     reopen the gate, RUNNING.
 * Failure injection (gpusim_inject_failure, sim_inject.c) is applied by
 * the caller before anything is asked of the target.
 */
#include "sim_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- target side (control thread) ------------------------------------ */

static void set_state(int state)
{
    sim_shm_lock();
    struct sim_proc *p = sim_proc_self_locked();
    if (p)
        p->state = state;
    sim_shm_unlock();
}

static int lock_ready(void)
{
    return sim_g.active_calls == 0 && sim_g.pending_ops == 0;
}

static CUresult do_lock(uint32_t timeout_ms)
{
    uint64_t deadline = timeout_ms ? sim_now_ns() + (uint64_t)timeout_ms * 1000000ULL : 0;
    sim_lock();
    sim_g.gate_closed = 1;
    while (!lock_ready()) {
        if (deadline) {
            if (sim_cond_timedwait(deadline) == ETIMEDOUT && !lock_ready()) {
                sim_g.gate_closed = 0;
                sim_broadcast();
                sim_unlock();
                return CUDA_ERROR_TIMEOUT;
            }
        } else {
            sim_cond_wait();
        }
    }
    sim_unlock();
    set_state(CU_PROCESS_STATE_LOCKED);
    return CUDA_SUCCESS;
}

static CUresult do_checkpoint(void)
{
    uint64_t bytes[SIM_MAX_DEVICES] = {0};
    sim_lock();
    CUresult rc = sim_mem_checkpoint_locked(bytes);
    if (rc == CUDA_SUCCESS) {
        rc = sim_vmm_checkpoint_locked(bytes);
        if (rc != CUDA_SUCCESS)
            sim_mem_restore_locked(); /* undo: nothing changes on failure */
    }
    uint64_t image = 0, used = 0, limit = 0;
    int killed = 0;
    if (rc == CUDA_SUCCESS) {
        sim_shm_lock();
        struct sim_proc *p = sim_proc_self_locked();
        for (int d = 0; p && d < SIM_MAX_DEVICES; d++) {
            uint64_t b = bytes[d] < p->resident[d] ? bytes[d] : p->resident[d];
            p->resident[d] -= b;
            p->checkpointed[d] += b;
            sim_seg->used[d] -= b < sim_seg->used[d] ? b : sim_seg->used[d];
            image += b;
        }
        /* the image is in this process' host memory: beyond the host's,
         * Linux's OOM killer would take this process */
        used = sim_seg->host_used;
        limit = sim_seg->host_limit;
        killed = p && sim_host_image_charge_locked(p, image) != 0;
        if (p)
            p->state = CU_PROCESS_STATE_CHECKPOINTED;
        sim_shm_broadcast(&sim_seg->slot_cv);
        sim_shm_unlock();
    }
    sim_unlock();
    if (killed)
        sim_host_oom_kill(image, used, limit);
    return rc;
}

/* The machine index of a UUID's bytes, or -1. */
static int device_of_uuid(const unsigned char *bytes)
{
    for (int d = 0; d < sim_g.cfg.devices; d++) {
        CUuuid u;
        sim_device_uuid(d, &u);
        if (memcmp(u.bytes, bytes, sizeof u.bytes) == 0)
            return d;
    }
    return -1;
}

/* The restore's GPU pairs as a map of machine indices (old -> new).  As
 * the driver does (580, two H200s): the pairs must name every GPU of the
 * machine once as old and once as new; a single pair 0 -> 1 gives
 * CUDA_ERROR_INVALID_VALUE, the swap 0 -> 1, 1 -> 0 moves the process.  The
 * simulated GPUs are all of one model. */
static CUresult pairs_map(const struct sim_proc *p, int *map)
{
    int n = sim_g.cfg.devices, seen_old[SIM_MAX_DEVICES] = {0}, seen_new[SIM_MAX_DEVICES] = {0};
    for (int d = 0; d < SIM_MAX_DEVICES; d++)
        map[d] = d;
    if (p->req_npairs == 0)
        return CUDA_SUCCESS;
    if (p->req_npairs != n)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < n; i++) {
        int o = device_of_uuid(p->req_pairs[i][0]), w = device_of_uuid(p->req_pairs[i][1]);
        if (o < 0 || w < 0 || seen_old[o]++ || seen_new[w]++)
            return CUDA_ERROR_INVALID_VALUE;
        map[o] = w;
    }
    return CUDA_SUCCESS;
}

static CUresult do_restore(void)
{
    sim_lock();
    sim_shm_lock();
    struct sim_proc *p = sim_proc_self_locked();
    int map[SIM_MAX_DEVICES];
    CUresult rc = p ? pairs_map(p, map) : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_ERROR_INVALID_VALUE && p) { /* refused: still checkpointed, as it was */
        sim_shm_unlock();
        sim_unlock();
        return rc;
    }
    if (p && p->restore_oom) { /* the real driver's state after a restore ran out */
        sim_shm_unlock();
        sim_unlock();
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    uint64_t need[SIM_MAX_DEVICES] = {0};
    for (int d = 0; p && d < SIM_MAX_DEVICES; d++)
        need[map[d]] += p->checkpointed[d];
    for (int pass = 0; pass < 2 && rc == CUDA_SUCCESS; pass++) {
        int fits = 1;
        for (int d = 0; d < SIM_MAX_DEVICES; d++)
            if (need[d] > sim_seg->capacity - sim_seg->used[d])
                fits = 0;
        if (fits)
            break;
        if (pass == 0)
            sim_reclaim_dead_locked();
        else {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            p->restore_oom = 1;
        }
    }
    if (rc == CUDA_SUCCESS) {
        for (int d = 0; d < SIM_MAX_DEVICES; d++) {
            sim_seg->used[d] += need[d];
            p->resident[d] += need[d];
            p->checkpointed[d] = 0;
        }
        sim_host_image_release_locked(p); /* back on the GPU */
        /* Moved: the process' ordinals name the new GPUs from now on (its
         * cuDeviceGetUuid says so, as on the real driver). */
        for (int i = 0; i < sim_g.nvisible; i++)
            sim_g.visible[i] = map[sim_g.visible[i]];
    }
    sim_shm_unlock();
    if (rc == CUDA_SUCCESS) {
        sim_mem_restore_locked();
        rc = sim_vmm_restore_locked();
    }
    sim_unlock();
    if (rc == CUDA_SUCCESS)
        set_state(CU_PROCESS_STATE_LOCKED);
    else if (rc != CUDA_ERROR_OUT_OF_MEMORY || p == NULL)
        set_state(CU_PROCESS_STATE_FAILED);
    return rc;
}

static CUresult do_unlock(void)
{
    set_state(CU_PROCESS_STATE_RUNNING);
    sim_lock();
    sim_g.gate_closed = 0;
    sim_broadcast();
    sim_unlock();
    return CUDA_SUCCESS;
}

static const int required_state[SIM_STEPS] = {
    [SIM_STEP_LOCK] = CU_PROCESS_STATE_RUNNING,
    [SIM_STEP_CHECKPOINT] = CU_PROCESS_STATE_LOCKED,
    [SIM_STEP_RESTORE] = CU_PROCESS_STATE_CHECKPOINTED,
    [SIM_STEP_UNLOCK] = CU_PROCESS_STATE_LOCKED,
};

static CUresult dispatch(int op, uint32_t timeout_ms)
{
    sim_shm_lock();
    struct sim_proc *p = sim_proc_self_locked();
    int state = p ? p->state : -1;
    sim_shm_unlock();
    if (op < 0 || op >= SIM_STEPS)
        return CUDA_ERROR_INVALID_VALUE;
    if (state != required_state[op])
        return CUDA_ERROR_ILLEGAL_STATE;
    switch (op) {
    case SIM_STEP_LOCK:
        return do_lock(timeout_ms);
    case SIM_STEP_CHECKPOINT:
        return do_checkpoint();
    case SIM_STEP_RESTORE:
        return do_restore();
    default:
        return do_unlock();
    }
}

static int ctl_ready;

static void *ctl_main(void *arg)
{
    (void)arg;
    uint64_t handled = 0;
    sim_shm_lock();
    struct sim_proc *p = sim_proc_self_locked();
    if (p)
        p->restore_tid = (int32_t)syscall(SYS_gettid);
    sim_shm_unlock();
    sim_lock(); /* lock order: sim_g.mu is never taken under the segment mutex */
    ctl_ready = 1;
    sim_broadcast();
    sim_unlock();
    sim_shm_lock();
    for (;;) {
        while ((p = sim_proc_self_locked()) != NULL && p->req_seq == handled)
            sim_shm_wait(&sim_seg->ctl_cv, 0);
        if (!p)
            break; /* exiting */
        handled = p->req_seq;
        int op = p->req_op;
        uint32_t timeout = p->req_timeout_ms;
        sim_shm_unlock();
        CUresult rc = dispatch(op, timeout);
        sim_shm_lock();
        p = sim_proc_self_locked();
        if (!p)
            break;
        p->resp_result = rc;
        p->resp_seq = handled;
        sim_shm_broadcast(&sim_seg->ctl_cv);
    }
    sim_shm_unlock();
    return NULL;
}

int sim_ctl_start(void)
{
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    sim_lock();
    ctl_ready = 0;
    sim_unlock();
    int r = pthread_create(&sim_g.ctl_thread, &attr, ctl_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (r != 0)
        return -1;
    /* cuInit returns once the restore thread id is published */
    sim_lock();
    while (!ctl_ready)
        sim_cond_wait();
    sim_unlock();
    return 0;
}

/* ---- caller side ------------------------------------------------------ */

static int still_target(const struct sim_proc *p, pid_t pid)
{
    return p->pid == pid && sim_pid_alive(pid, p->start_time);
}

static const char *const step_call[SIM_STEPS] = {
    "cuCheckpointProcessLock",
    "cuCheckpointProcessCheckpoint",
    "cuCheckpointProcessRestore",
    "cuCheckpointProcessUnlock",
};

/* The checkpoint calls need no cuInit in the caller: they attach to the
 * segment named by the environment (sim_have_segment). */
static CUresult request(int pid, int op, uint32_t timeout_ms, const CUcheckpointRestoreArgs *ra)
{
    if (!sim_have_segment())
        return CUDA_ERROR_INVALID_VALUE;
    sim_shm_lock();
    struct sim_proc *p = sim_proc_find_locked(pid);
    if (!p) {
        sim_shm_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* one request at a time per target */
    while (p->req_busy) {
        if (!sim_pid_alive(p->req_caller, p->req_caller_start)) {
            p->req_busy = 0; /* its caller died */
            break;
        }
        sim_shm_wait(&sim_seg->ctl_cv, sim_now_ns() + 50000000ULL);
        if (!still_target(p, pid)) {
            sim_shm_unlock();
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (p->state != required_state[op]) {
        sim_shm_unlock();
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    CUresult injected = sim_inject_take_locked(step_call[op]);
    if (injected != CUDA_SUCCESS) {
        sim_shm_unlock();
        return injected;
    }
    p->req_busy = 1;
    p->req_caller = getpid();
    p->req_caller_start = sim_pid_start_time(getpid());
    p->req_op = op;
    p->req_timeout_ms = timeout_ms;
    p->req_npairs = 0;
    for (unsigned i = 0; ra && ra->gpuPairs && i < ra->gpuPairsCount && i < SIM_MAX_DEVICES; i++) {
        memcpy(p->req_pairs[i][0], ra->gpuPairs[i].oldUuid.bytes, 16);
        memcpy(p->req_pairs[i][1], ra->gpuPairs[i].newUuid.bytes, 16);
        p->req_npairs++;
    }
    uint64_t seq = ++p->req_seq;
    sim_shm_broadcast(&sim_seg->ctl_cv);
    CUresult rc = CUDA_SUCCESS;
    for (;;) {
        if (p->pid != pid) {
            rc = CUDA_ERROR_INVALID_VALUE; /* target gone, entry reclaimed */
            break;
        }
        if (p->resp_seq == seq) {
            rc = (CUresult)p->resp_result;
            p->req_busy = 0;
            sim_shm_broadcast(&sim_seg->ctl_cv);
            break;
        }
        if (sim_shm_wait(&sim_seg->ctl_cv, sim_now_ns() + 50000000ULL) == ETIMEDOUT &&
            !still_target(p, pid)) {
            sim_reclaim_dead_locked();
            rc = CUDA_ERROR_INVALID_VALUE;
            break;
        }
    }
    sim_shm_unlock();
    return rc;
}

SIM_EXPORT CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
    if (args) {
        if (args->reserved0)
            return CUDA_ERROR_INVALID_VALUE;
        for (int i = 0; i < 7; i++)
            if (args->reserved1[i])
                return CUDA_ERROR_INVALID_VALUE;
    }
    return request(pid, SIM_STEP_LOCK, args ? args->timeoutMs : 0, NULL);
}

SIM_EXPORT CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
    for (int i = 0; args && i < 8; i++)
        if (args->reserved[i])
            return CUDA_ERROR_INVALID_VALUE;
    return request(pid, SIM_STEP_CHECKPOINT, 0, NULL);
}

SIM_EXPORT CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
    if (args) {
        if ((args->gpuPairsCount && !args->gpuPairs) || args->gpuPairsCount > SIM_MAX_DEVICES ||
            args->reserved1)
            return CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; i < sizeof args->reserved; i++)
            if (args->reserved[i])
                return CUDA_ERROR_INVALID_VALUE;
    }
    return request(pid, SIM_STEP_RESTORE, 0, args);
}

SIM_EXPORT CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
    for (int i = 0; args && i < 8; i++)
        if (args->reserved[i])
            return CUDA_ERROR_INVALID_VALUE;
    return request(pid, SIM_STEP_UNLOCK, 0, NULL);
}

static CUresult query(int pid, CUprocessState *state, int *tid)
{
    if (!sim_have_segment())
        return CUDA_ERROR_INVALID_VALUE;
    sim_shm_lock();
    struct sim_proc *p = sim_proc_find_locked(pid);
    if (p && state)
        *state = (CUprocessState)p->state;
    if (p && tid)
        *tid = p->restore_tid;
    sim_shm_unlock();
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    return query(pid, state, NULL);
}

SIM_EXPORT CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
    if (!tid)
        return CUDA_ERROR_INVALID_VALUE;
    return query(pid, NULL, tid);
}

/* The first injection export, kept for its users: the same as
 * gpusim_inject_failure("cuCheckpointProcess<Step>", count, UNKNOWN, 0). */
SIM_EXPORT int gpusim_inject_checkpoint_failure(const char *step, int count)
{
    static const char *const names[SIM_STEPS] = {"lock", "checkpoint", "restore", "unlock"};
    for (int i = 0; step && i < SIM_STEPS; i++)
        if (strcmp(step, names[i]) == 0)
            return gpusim_inject_failure(step_call[i], count, CUDA_ERROR_UNKNOWN, 0);
    return -1;
}
