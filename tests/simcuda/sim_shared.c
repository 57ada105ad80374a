/*
 * sim_shared.c - the one simulated machine that every process using this
 * libcuda shares: a POSIX shared-memory segment holding the settings, the
 * per-device capacity/usage, busy time and engine slots, and the process
 * table with the checkpoint mailboxes.  Everything in it is guarded by one
 * robust, process-shared mutex (a holder that dies is recovered with
 * pthread_mutex_consistent); waits use futex-based condition variables
 * (struct sim_shm_cond, see sim_internal.h for why not pthread_cond_t)
 * with CLOCK_MONOTONIC deadlines.  Dead processes are reclaimed lazily here.
 */
#include "sim_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct sim_segment *sim_seg;
static char attached_name[256];
static pthread_mutex_t attach_mu = PTHREAD_MUTEX_INITIALIZER;

static void init_segment(struct sim_segment *s, const struct sim_config *cfg)
{
    pthread_mutexattr_t ma;

    memset(s, 0, sizeof *s);
    s->magic = SIM_MAGIC;
    s->layout_size = sizeof *s;
    s->device_count = (uint32_t)cfg->devices;
    s->concurrency = cfg->concurrency;
    s->capacity = cfg->memory;
    s->host_limit = cfg->host_memory;
    snprintf(s->name, sizeof s->name, "%s", cfg->name);

    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&s->mutex, &ma);
    pthread_mutexattr_destroy(&ma);

    atomic_store_explicit(&s->initialised, 1, memory_order_release);
}

static struct sim_segment *map_fd(int fd)
{
    void *p = mmap(NULL, sizeof(struct sim_segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Waits (up to ~2 s) for a creator to finish initialising fd's segment.
 * Returns the mapping, or NULL if it never became ready. */
static struct sim_segment *attach_fd(int fd)
{
    for (int i = 0; i < 2000; i++) {
        struct stat st;
        if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(struct sim_segment)) {
            struct sim_segment *s = map_fd(fd);
            if (!s)
                return NULL;
            for (; i < 2000; i++) {
                if (atomic_load_explicit(&s->initialised, memory_order_acquire))
                    return s;
                sleep_ms(1); /* only while a creator is between create and publish */
            }
            munmap(s, sizeof *s);
            return NULL;
        }
        sleep_ms(1);
    }
    return NULL;
}

static int compatible(const struct sim_segment *s, const char *name)
{
    if (s->magic == SIM_MAGIC && s->layout_size == sizeof *s)
        return 1;
    fprintf(stderr,
            "gpushare simulated driver: shared segment %s has an incompatible layout "
            "(left by another build?); remove /dev/shm%s\n",
            name, name);
    return 0;
}

/* A segment that no live process uses any more (segments outlive their
 * processes) takes the settings of the process attaching it, as if it
 * had created it; its busy counters are kept, and so are armed failure
 * injections (a test may arm one before starting the process to fail). */
static void adopt_if_abandoned(const struct sim_config *cfg)
{
    sim_shm_lock();
    sim_reclaim_dead_locked();
    int live = 0;
    for (int i = 0; i < SIM_MAX_PROCS; i++)
        live += sim_seg->procs[i].pid != 0;
    if (!live) {
        sim_seg->device_count = (uint32_t)cfg->devices;
        sim_seg->concurrency = cfg->concurrency;
        sim_seg->capacity = cfg->memory;
        sim_seg->host_limit = cfg->host_memory;
        sim_seg->host_used = 0; /* nobody lives to hold any */
        memset(sim_seg->used, 0, sizeof sim_seg->used);
        memset(sim_seg->slots_used, 0, sizeof sim_seg->slots_used);
        memset(sim_seg->shares, 0, sizeof sim_seg->shares);
    }
    sim_shm_unlock();
}

CUresult sim_shared_open(const struct sim_config *cfg)
{
    pthread_mutex_lock(&attach_mu);
    if (sim_seg && strcmp(attached_name, cfg->name) == 0) {
        pthread_mutex_unlock(&attach_mu);
        return CUDA_SUCCESS;
    }
    if (sim_seg) {
        munmap(sim_seg, sizeof *sim_seg);
        sim_seg = NULL;
    }
    CUresult rc = CUDA_ERROR_OPERATING_SYSTEM;
    for (int attempt = 0; attempt < 5; attempt++) {
        int fd = shm_open(cfg->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            struct sim_segment *s = NULL;
            /* A shared GPU is every user's, as the device nodes are (0666);
             * fchmod, not the mode argument, which the umask would narrow. */
            if (cfg->shared)
                (void)fchmod(fd, 0666);
            if (ftruncate(fd, sizeof *s) == 0)
                s = map_fd(fd);
            close(fd);
            if (!s) {
                fprintf(stderr, "gpushare simulated driver: cannot create %s: %s\n", cfg->name,
                        strerror(errno));
                shm_unlink(cfg->name);
                break;
            }
            init_segment(s, cfg);
            sim_seg = s;
            rc = CUDA_SUCCESS;
            break;
        }
        if (errno != EEXIST) {
            fprintf(stderr, "gpushare simulated driver: shm_open(%s): %s\n", cfg->name,
                    strerror(errno));
            break;
        }
        fd = shm_open(cfg->name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0) {
            if (errno == ENOENT)
                continue; /* unlinked meanwhile: try creating again */
            fprintf(stderr, "gpushare simulated driver: shm_open(%s): %s\n", cfg->name,
                    strerror(errno));
            break;
        }
        struct sim_segment *s = attach_fd(fd);
        close(fd);
        if (!s) {
            /* its creator died before publishing it: replace it */
            shm_unlink(cfg->name);
            continue;
        }
        if (!compatible(s, cfg->name)) {
            munmap(s, sizeof *s);
            rc = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        sim_seg = s;
        adopt_if_abandoned(cfg);
        rc = CUDA_SUCCESS;
        break;
    }
    if (rc == CUDA_SUCCESS)
        snprintf(attached_name, sizeof attached_name, "%s", cfg->name);
    pthread_mutex_unlock(&attach_mu);
    return rc;
}

int sim_shared_attach_existing(void)
{
    if (atomic_load(&sim_g.initialised))
        return sim_seg ? 0 : -1;
    char name[256];
    sim_config_segment_name(name, sizeof name);
    pthread_mutex_lock(&attach_mu);
    int rc = 0;
    if (!sim_seg || strcmp(attached_name, name) != 0) {
        if (sim_seg) {
            munmap(sim_seg, sizeof *sim_seg);
            sim_seg = NULL;
            attached_name[0] = 0;
        }
        rc = -1;
        int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
        if (fd >= 0) {
            struct stat st;
            if (fstat(fd, &st) == 0 && (size_t)st.st_size == sizeof(struct sim_segment)) {
                struct sim_segment *s = map_fd(fd);
                if (s && s->magic == SIM_MAGIC && s->layout_size == sizeof *s &&
                    atomic_load_explicit(&s->initialised, memory_order_acquire)) {
                    sim_seg = s;
                    snprintf(attached_name, sizeof attached_name, "%s", name);
                    rc = 0;
                } else if (s) {
                    munmap(s, sizeof *s);
                }
            }
            close(fd);
        }
    }
    pthread_mutex_unlock(&attach_mu);
    return rc;
}

void sim_shared_detach_if(const char *name)
{
    if (atomic_load(&sim_g.initialised))
        return;
    pthread_mutex_lock(&attach_mu);
    if (sim_seg && strcmp(attached_name, name) == 0) {
        munmap(sim_seg, sizeof *sim_seg);
        sim_seg = NULL;
        attached_name[0] = 0;
    }
    pthread_mutex_unlock(&attach_mu);
}

void sim_shm_lock(void)
{
    int r = pthread_mutex_lock(&sim_seg->mutex);
    if (r == EOWNERDEAD) {
        pthread_mutex_consistent(&sim_seg->mutex);
        sim_reclaim_dead_locked();
    } else if (r != 0) {
        fprintf(stderr, "gpushare simulated driver: segment mutex unusable: %s\n", strerror(r));
        abort();
    }
}

void sim_shm_unlock(void)
{
    pthread_mutex_unlock(&sim_seg->mutex);
}

int sim_shm_wait(struct sim_shm_cond *cv, uint64_t abs_ns)
{
    uint32_t seq = atomic_load(&cv->seq);
    struct timespec ts = {(time_t)(abs_ns / 1000000000ULL), (long)(abs_ns % 1000000000ULL)};
    sim_shm_unlock();
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time; not
     * FUTEX_PRIVATE: the word is in a mapping shared between processes */
    long r = syscall(SYS_futex, &cv->seq, FUTEX_WAIT_BITSET, seq, abs_ns ? &ts : NULL, NULL,
                     FUTEX_BITSET_MATCH_ANY);
    int timed_out = r != 0 && errno == ETIMEDOUT;
    sim_shm_lock();
    return timed_out ? ETIMEDOUT : 0;
}

void sim_shm_broadcast(struct sim_shm_cond *cv)
{
    atomic_fetch_add(&cv->seq, 1);
    syscall(SYS_futex, &cv->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* starttime (field 22) and state (field 3) of /proc/<pid>/stat; 0 if unreadable. */
static uint64_t read_stat(pid_t pid, char *state)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return 0;
    p += 2;
    *state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return 0;
        p++;
    }
    return strtoull(p, NULL, 10);
}

uint64_t sim_pid_start_time(pid_t pid)
{
    char st;
    return read_stat(pid, &st);
}

int sim_pid_alive(pid_t pid, uint64_t start_time)
{
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    char st = 0;
    uint64_t t = read_stat(pid, &st);
    if (t == 0)
        return 1; /* no /proc view: trust kill() */
    if (st == 'Z' || st == 'X')
        return 0; /* exited, not yet reaped */
    if (start_time && t != start_time)
        return 0; /* pid reused */
    return 1;
}

/* ---- shared device memory ---------------------------------------------- */

static struct sim_share *share_find_locked(uint64_t id)
{
    for (int i = 0; id && i < SIM_MAX_SHARES; i++)
        if (sim_seg->shares[i].id == id)
            return &sim_seg->shares[i];
    return NULL;
}

static int share_held(const struct sim_share *sh)
{
    for (int w = 0; w < SIM_MAX_PROCS / 64; w++)
        if (sh->holders[w])
            return 1;
    return 0;
}

/* Clears holder bit `idx`; the last holder gives the bytes back. */
static void share_drop_locked(struct sim_share *sh, int idx)
{
    sh->holders[idx / 64] &= ~(1ULL << (idx % 64));
    if (share_held(sh))
        return;
    uint64_t *used = &sim_seg->used[sh->dev];
    *used -= sh->bytes < *used ? sh->bytes : *used;
    memset(sh, 0, sizeof *sh);
    sim_shm_broadcast(&sim_seg->slot_cv);
}

static struct sim_share *share_new_locked(uint64_t id, int dev, uint64_t bytes)
{
    for (int i = 0; i < SIM_MAX_SHARES; i++) {
        struct sim_share *sh = &sim_seg->shares[i];
        if (sh->id == 0) {
            memset(sh, 0, sizeof *sh);
            sh->id = id;
            sh->dev = dev;
            sh->bytes = bytes;
            return sh;
        }
    }
    return NULL;
}

CUresult sim_share_export_locked(int dev, uint64_t bytes, uint64_t *id)
{
    dev = sim_dev_phys(dev); /* the machine's device */
    struct sim_proc *self = sim_proc_self_locked();
    if (!self)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_share *sh = share_new_locked(++sim_seg->next_share_id, dev, bytes);
    if (!sh)
        return CUDA_ERROR_OUT_OF_MEMORY; /* table full */
    /* still counted in used[]: from now on as the entry's, not ours */
    uint64_t b = bytes < self->resident[dev] ? bytes : self->resident[dev];
    self->resident[dev] -= b;
    sh->holders[sim_g.proc_idx / 64] |= 1ULL << (sim_g.proc_idx % 64);
    *id = sh->id;
    return CUDA_SUCCESS;
}

CUresult sim_share_join_locked(uint64_t id, int dev, uint64_t bytes)
{
    dev = sim_dev_phys(dev); /* the machine's device */
    if (!sim_proc_self_locked())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_share *sh = share_find_locked(id);
    if (!sh) {
        /* every holder released it while a descriptor was in flight: the
         * memory comes back, and counts again */
        if (bytes > sim_seg->capacity - sim_seg->used[dev])
            sim_reclaim_dead_locked();
        if (bytes > sim_seg->capacity - sim_seg->used[dev])
            return CUDA_ERROR_OUT_OF_MEMORY;
        sh = share_new_locked(id, dev, bytes);
        if (!sh)
            return CUDA_ERROR_OUT_OF_MEMORY;
        sim_seg->used[dev] += bytes;
    }
    sh->holders[sim_g.proc_idx / 64] |= 1ULL << (sim_g.proc_idx % 64);
    return CUDA_SUCCESS;
}

void sim_share_leave_locked(uint64_t id)
{
    struct sim_share *sh = share_find_locked(id);
    if (sh && sim_proc_self_locked())
        share_drop_locked(sh, sim_g.proc_idx);
}

static void release_entry_locked(struct sim_proc *p)
{
    int idx = (int)(p - sim_seg->procs);
    for (int i = 0; i < SIM_MAX_SHARES; i++) {
        struct sim_share *sh = &sim_seg->shares[i];
        if (sh->id && (sh->holders[idx / 64] & (1ULL << (idx % 64))))
            share_drop_locked(sh, idx);
    }
    for (int d = 0; d < SIM_MAX_DEVICES; d++) {
        sim_seg->used[d] -= p->resident[d] < sim_seg->used[d] ? p->resident[d] : sim_seg->used[d];
        sim_seg->slots_used[d] -=
            p->slots_held[d] < sim_seg->slots_used[d] ? p->slots_held[d] : sim_seg->slots_used[d];
    }
    sim_host_proc_gone_locked(p);
    memset(p, 0, sizeof *p);
    sim_shm_broadcast(&sim_seg->slot_cv);
    sim_shm_broadcast(&sim_seg->ctl_cv);
}

void sim_reclaim_dead_locked(void)
{
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        struct sim_proc *p = &sim_seg->procs[i];
        if (p->pid && !sim_pid_alive(p->pid, p->start_time))
            release_entry_locked(p);
    }
}

int sim_proc_register_locked(void)
{
    pid_t me = getpid();
    uint64_t start = sim_pid_start_time(me);
    sim_reclaim_dead_locked();
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        /* an entry of ours from before an exec(): its resources are gone */
        if (sim_seg->procs[i].pid == me)
            release_entry_locked(&sim_seg->procs[i]);
    }
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        struct sim_proc *p = &sim_seg->procs[i];
        if (p->pid == 0) {
            memset(p, 0, sizeof *p);
            p->pid = me;
            p->start_time = start;
            p->state = CU_PROCESS_STATE_RUNNING;
            return i;
        }
    }
    return -1;
}

struct sim_proc *sim_proc_self_locked(void)
{
    if (sim_g.detached || sim_g.proc_idx < 0)
        return NULL;
    struct sim_proc *p = &sim_seg->procs[sim_g.proc_idx];
    return p->pid == sim_g.pid ? p : NULL;
}

struct sim_proc *sim_proc_find_locked(pid_t pid)
{
    if (pid <= 0)
        return NULL;
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        struct sim_proc *p = &sim_seg->procs[i];
        if (p->pid == pid) {
            if (!sim_pid_alive(pid, p->start_time)) {
                release_entry_locked(p);
                return NULL;
            }
            return p;
        }
    }
    return NULL;
}

CUresult sim_capacity_reserve(int dev, uint64_t bytes)
{
    dev = sim_dev_phys(dev); /* the machine's device */
    CUresult rc = CUDA_SUCCESS;
    sim_shm_lock();
    struct sim_proc *self = sim_proc_self_locked();
    if (!self) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        if (bytes > sim_seg->capacity - sim_seg->used[dev])
            sim_reclaim_dead_locked();
        if (bytes > sim_seg->capacity - sim_seg->used[dev]) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            sim_seg->used[dev] += bytes;
            self->resident[dev] += bytes;
        }
    }
    sim_shm_unlock();
    return rc;
}

void sim_capacity_release(int dev, uint64_t bytes)
{
    dev = sim_dev_phys(dev); /* the machine's device */
    sim_shm_lock();
    struct sim_proc *self = sim_proc_self_locked();
    if (self) {
        uint64_t b = bytes < self->resident[dev] ? bytes : self->resident[dev];
        self->resident[dev] -= b;
        sim_seg->used[dev] -= b < sim_seg->used[dev] ? b : sim_seg->used[dev];
    }
    sim_shm_unlock();
}

/* One kernel at a time per engine slot, across all processes.  A waiter
 * reclaims dead processes (and the slots they held) every 10 ms. */
void sim_slot_acquire(int dev)
{
    dev = sim_dev_phys(dev); /* the machine's device */
    sim_shm_lock();
    while (sim_seg->slots_used[dev] >= sim_seg->concurrency && sim_proc_self_locked()) {
        if (sim_shm_wait(&sim_seg->slot_cv, sim_now_ns() + 10000000ULL) == ETIMEDOUT)
            sim_reclaim_dead_locked();
    }
    struct sim_proc *self = sim_proc_self_locked();
    if (self) {
        sim_seg->slots_used[dev]++;
        self->slots_held[dev]++;
    }
    sim_shm_unlock();
}

void sim_slot_release(int dev, uint64_t busy_ns)
{
    dev = sim_dev_phys(dev); /* the machine's device */
    sim_shm_lock();
    struct sim_proc *self = sim_proc_self_locked();
    if (self) {
        /* after our destructor ran, the slot was already given back */
        if (self->slots_held[dev]) {
            self->slots_held[dev]--;
            if (sim_seg->slots_used[dev])
                sim_seg->slots_used[dev]--;
        }
        self->busy_ns[dev] += busy_ns;
        sim_seg->busy_ns[dev] += busy_ns;
        sim_shm_broadcast(&sim_seg->slot_cv);
    }
    sim_shm_unlock();
}

void sim_proc_unregister(void)
{
    if (!sim_seg)
        return;
    sim_shm_lock();
    struct sim_proc *self = sim_proc_self_locked();
    if (self)
        release_entry_locked(self);
    sim_g.detached = 1;
    sim_shm_broadcast(&sim_seg->ctl_cv);
    sim_shm_unlock();
}
