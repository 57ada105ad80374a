/*
 * sim_host.c - the simulated host's memory (GPUSHARE_SIM_HOST_MEMORY): how
 * much RAM the machine has for gpushare's parked memory, so that tests can
 * prove the broker's host accounting.  Charged in the shared segment, per
 * process: pinned host memory a process makes (cuMemHostAlloc,
 * cuMemAllocHost, cuMemCreate on a host location: the broker's pool) and
 * the image a checkpoint keeps in the parked process' host memory.  Given
 * back when freed, restored, or when the process exits or dies.
 *
 * Beyond the limit, pinning fails with CUDA_ERROR_OUT_OF_MEMORY (as the
 * real driver does when it cannot pin), but a checkpoint has no error to
 * return: on Linux the parked process grows until the OOM killer takes
 * it.  So the simulator kills the target with SIGKILL and says so on its
 * stderr and in the execution log, as the kernel would in dmesg.
 */
#include "sim_internal.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Would `bytes` more exceed the limit?  (segment mutex held) */
static int over_locked(uint64_t bytes)
{
    uint64_t lim = sim_seg->host_limit;
    return lim && (bytes > lim || sim_seg->host_used > lim - bytes);
}

static void add_locked(uint64_t bytes)
{
    sim_seg->host_used += bytes;
    if (sim_seg->host_used > sim_seg->host_peak)
        sim_seg->host_peak = sim_seg->host_used;
}

static void sub_locked(uint64_t bytes)
{
    sim_seg->host_used -= bytes < sim_seg->host_used ? bytes : sim_seg->host_used;
}

CUresult sim_host_charge(uint64_t bytes)
{
    CUresult rc = CUDA_SUCCESS;
    sim_shm_lock();
    struct sim_proc *self = sim_proc_self_locked();
    if (self && over_locked(bytes))
        sim_reclaim_dead_locked(); /* the dead hold nothing */
    if (!self || over_locked(bytes)) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        self->host_pinned += bytes;
        add_locked(bytes);
    }
    sim_shm_unlock();
    return rc;
}

void sim_host_uncharge(uint64_t bytes)
{
    sim_shm_lock();
    /* after our destructor ran, the entry (and its charges) are gone */
    struct sim_proc *self = sim_proc_self_locked();
    if (self) {
        uint64_t b = bytes < self->host_pinned ? bytes : self->host_pinned;
        self->host_pinned -= b;
        sub_locked(b);
    }
    sim_shm_unlock();
}

int sim_host_image_charge_locked(struct sim_proc *p, uint64_t bytes)
{
    if (over_locked(bytes))
        sim_reclaim_dead_locked();
    if (over_locked(bytes)) {
        sim_seg->host_kills++;
        sim_seg->host_last_killed = p->pid;
        return -1;
    }
    p->host_image += bytes;
    add_locked(bytes);
    return 0;
}

void sim_host_image_release_locked(struct sim_proc *p)
{
    sub_locked(p->host_image);
    p->host_image = 0;
}

void sim_host_proc_gone_locked(const struct sim_proc *p)
{
    sub_locked(p->host_pinned + p->host_image);
}

_Noreturn void sim_host_oom_kill(uint64_t bytes, uint64_t used, uint64_t limit)
{
    char line[256];
    int n = snprintf(line, sizeof line,
                     "gpusim: out of host memory: killed process %d (checkpoint of %llu bytes, "
                     "%llu of %llu in use)\n",
                     (int)getpid(), (unsigned long long)bytes, (unsigned long long)used,
                     (unsigned long long)limit);
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
    uint64_t now = sim_now_ns();
    sim_log_op(-1, "oom_kill", "checkpoint", NULL, now, now, (long long)bytes);
    kill(getpid(), SIGKILL);
    for (;;)
        pause(); /* SIGKILL is not blocked: never reached */
}

SIM_EXPORT int gpusim_host_stats(struct gpusim_host_stats *out)
{
    if (!out)
        return -1;
    memset(out, 0, sizeof *out);
    if (!sim_have_segment())
        return -1;
    sim_shm_lock();
    sim_reclaim_dead_locked(); /* what the living hold */
    out->limit = sim_seg->host_limit;
    out->used = sim_seg->host_used;
    out->peak = sim_seg->host_peak;
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        out->pinned += sim_seg->procs[i].host_pinned;
        out->images += sim_seg->procs[i].host_image;
    }
    out->kills = sim_seg->host_kills;
    out->last_killed_pid = sim_seg->host_last_killed;
    sim_shm_unlock();
    return 0;
}
