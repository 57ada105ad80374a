/*
 * sim_state.c - the process-local half of the simulator: the global state
 * (one mutex + one condvar guard every local object), the handle registry,
 * the initialisation done by cuInit, and the lifecycle hooks (fork
 * handlers, the exit destructor that gives this process' capacity back).
 */
#include "sim_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct sim_global sim_g = {
    .proc_idx = -1,
    .log_fd = -1,
    .mu = PTHREAD_MUTEX_INITIALIZER,
};

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

uint64_t sim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void sim_lock(void)
{
    pthread_mutex_lock(&sim_g.mu);
}

void sim_unlock(void)
{
    pthread_mutex_unlock(&sim_g.mu);
}

void sim_broadcast(void)
{
    pthread_cond_broadcast(&sim_g.cv);
}

void sim_cond_wait(void)
{
    pthread_cond_wait(&sim_g.cv, &sim_g.mu);
}

int sim_cond_timedwait(uint64_t abs_ns)
{
    struct timespec ts = {(time_t)(abs_ns / 1000000000ULL), (long)(abs_ns % 1000000000ULL)};
    return pthread_cond_timedwait(&sim_g.cv, &sim_g.mu, &ts) == ETIMEDOUT ? ETIMEDOUT : 0;
}

/* ---- handle registry -------------------------------------------------- */

static unsigned hslot(uintptr_t key)
{
    uint64_t h = (uint64_t)key * 0x9e3779b97f4a7c15ULL;
    return (unsigned)(h >> 52) % SIM_HBUCKETS;
}

int sim_hmap_put(struct sim_hmap *m, uintptr_t key, int type, void *val)
{
    struct sim_hentry *e = malloc(sizeof *e);
    if (!e)
        return -1;
    unsigned i = hslot(key);
    e->key = key;
    e->type = type;
    e->val = val;
    e->next = m->b[i];
    m->b[i] = e;
    return 0;
}

void *sim_hmap_get(const struct sim_hmap *m, uintptr_t key, int type)
{
    for (struct sim_hentry *e = m->b[hslot(key)]; e; e = e->next)
        if (e->key == key && e->type == type)
            return e->val;
    return NULL;
}

void *sim_hmap_del(struct sim_hmap *m, uintptr_t key, int type)
{
    for (struct sim_hentry **pp = &m->b[hslot(key)]; *pp; pp = &(*pp)->next) {
        struct sim_hentry *e = *pp;
        if (e->key == key && e->type == type) {
            void *v = e->val;
            *pp = e->next;
            free(e);
            return v;
        }
    }
    return NULL;
}

void sim_hmap_each(const struct sim_hmap *m, int type, void (*fn)(void *val, void *arg), void *arg)
{
    for (unsigned i = 0; i < SIM_HBUCKETS; i++)
        for (struct sim_hentry *e = m->b[i]; e; e = e->next)
            if (e->type == type)
                fn(e->val, arg);
}

/* ---- lifecycle -------------------------------------------------------- */

static void init_cv(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sim_g.cv, &ca);
    pthread_condattr_destroy(&ca);
}

static void atfork_prepare(void)
{
    pthread_mutex_lock(&init_mu);
    pthread_mutex_lock(&sim_g.mu);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&sim_g.mu);
    pthread_mutex_unlock(&init_mu);
}

/* The child of a fork has none of the parent's threads: it starts over as
 * an uninitialised process (cuInit again gives it a table entry of its own;
 * the parent's allocations are not its own). */
static void atfork_child(void)
{
    /* this thread locked both in atfork_prepare: they are consistent */
    pthread_mutex_unlock(&sim_g.mu);
    pthread_mutex_unlock(&init_mu);
    init_cv(); /* waiters of other (parent) threads do not exist here */
    atomic_store(&sim_g.initialised, 0);
    sim_g.pid = 0;
    sim_g.proc_idx = -1;
    sim_g.detached = 0;
    sim_g.gate_closed = 0;
    sim_g.active_calls = 0;
    sim_g.pending_ops = 0;
    memset(&sim_g.handles, 0, sizeof sim_g.handles);
    memset(&sim_g.allocs, 0, sizeof sim_g.allocs);
    memset(sim_g.primary, 0, sizeof sim_g.primary);
    sim_g.ctxs = NULL;
    sim_g.captures = NULL;
    sim_g.resvs = NULL;
    sim_g.phys = NULL;
    sim_g.managed_count = 0;
    for (int d = 0; d < SIM_MAX_DEVICES; d++)
        atomic_store(&sim_g.proc_busy_ns[d], 0);
    if (sim_g.log_fd >= 0) {
        close(sim_g.log_fd);
        sim_g.log_fd = -1;
    }
}

__attribute__((constructor)) static void sim_constructor(void)
{
    init_cv();
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Normal exit: give this process' capacity and table entry back at once
 * (a process that dies otherwise is reclaimed lazily by the others). */
__attribute__((destructor)) static void sim_destructor(void)
{
    if (atomic_load(&sim_g.initialised) && sim_g.pid == getpid())
        sim_proc_unregister();
}

static CUresult do_init(void)
{
    struct sim_config cfg;
    if (sim_config_load(&cfg) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_shared_open(&cfg);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_g.cfg = cfg;
    /* the machine is the creator's: devices/memory/concurrency from it */
    sim_g.cfg.devices = (int)sim_seg->device_count;
    sim_g.cfg.memory = sim_seg->capacity;
    sim_g.cfg.concurrency = sim_seg->concurrency;
    char uuids[SIM_MAX_DEVICES][SIM_UUID_STRLEN];
    for (int d = 0; d < sim_g.cfg.devices; d++) {
        CUuuid u;
        sim_device_uuid(d, &u);
        sim_uuid_string(&u, uuids[d]);
    }
    sim_g.nvisible = sim_visible_parse(getenv("CUDA_VISIBLE_DEVICES"), sim_g.cfg.devices,
                                       (const char(*)[SIM_UUID_STRLEN])uuids, sim_g.visible);
    if (sim_g.nvisible == 0)
        return CUDA_ERROR_NO_DEVICE; /* as the driver: CUDA_VISIBLE_DEVICES names none */
    sim_g.pid = getpid();
    sim_g.detached = 0;

    sim_shm_lock();
    sim_g.proc_idx = sim_proc_register_locked();
    sim_shm_unlock();
    if (sim_g.proc_idx < 0) {
        fprintf(stderr, "gpushare simulated driver: process table of %s is full (%d)\n", cfg.name,
                SIM_MAX_PROCS);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (cfg.log_path[0])
        sim_log_open(cfg.log_path, cfg.shared);
    if (sim_ctl_start() != 0) {
        sim_proc_unregister();
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (atomic_load(&sim_g.initialised))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&init_mu);
    CUresult rc = CUDA_SUCCESS;
    if (!atomic_load(&sim_g.initialised)) {
        /* a failed cuInit may be retried (e.g. after fixing the environment) */
        rc = do_init();
        if (rc == CUDA_SUCCESS)
            atomic_store(&sim_g.initialised, 1);
    }
    pthread_mutex_unlock(&init_mu);
    return rc;
}
