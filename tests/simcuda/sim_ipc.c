/*
 * sim_ipc.c - legacy CUDA IPC (cuIpcGetMemHandle, cuIpcOpenMemHandle,
 * cuIpcCloseMemHandle) for cuMemAlloc memory: what torch.multiprocessing
 * uses to share CUDA tensors.
 *
 * cuMemAlloc memory is an anonymous mapping; the first cuIpcGetMemHandle
 * of an allocation moves it, in place, onto a memfd (MAP_SHARED, same
 * address, contents copied after the process' queued work is done) that
 * the allocation keeps until it is freed.  The 64-byte handle names the
 * exporter (pid and start time), the descriptor number and the memfd's
 * inode; another process of the same user opens /proc/<pid>/fd/<n> (or
 * takes it with pidfd_getfd), checks the inode (so a freed allocation
 * whose descriptor number was reused is refused) and maps it at an
 * address of its own.  Doing it lazily keeps a descriptor per allocation
 * away from programs that never use IPC.
 *
 * The real driver's rules: only cuMemAlloc memory (not virtual memory,
 * stream-ordered, managed or host memory: CUDA_ERROR_INVALID_VALUE); an
 * interior pointer gives the handle of its whole allocation; the process
 * that made a handle cannot open it (CUDA_ERROR_INVALID_CONTEXT, "invalid
 * device context" on a real driver); opening a handle already open in the
 * process returns the same pointer and counts a reference, which
 * cuIpcCloseMemHandle drops.  Opened memory is not counted against
 * capacity again, and processes sharing memory this way cannot be
 * checkpointed.
 */
#include "sim_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define IPC_MAGIC 0x50497367u /* "gsIP" */

struct ipc_handle {
    uint32_t magic;
    int32_t pid;
    uint64_t start_time;
    int32_t fd;
    int32_t dev;
    uint64_t ino;
    uint64_t size;
    uint64_t map_size;
    uint64_t id;
};

_Static_assert(sizeof(struct ipc_handle) <= CU_IPC_HANDLE_SIZE, "fits CUipcMemHandle");

/* Moves a's pages onto a memfd at the same address (sim_g.mu held, the
 * process' queued work done).  Only pages holding something are written:
 * the rest reads as zeros from the memfd's holes, and a large allocation
 * that was barely touched does not become that much shared memory. */
static int make_shareable_locked(struct sim_alloc *a)
{
    static const char zero[4096];
    size_t pg = sizeof zero;
    int fd = memfd_create("gpusim-ipc", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    int ok = ftruncate(fd, (off_t)a->map_size) == 0 && a->map_size % pg == 0;
    for (size_t off = 0; ok && off < a->map_size;) {
        if (memcmp((char *)a->base + off, zero, pg) == 0) {
            off += pg;
            continue;
        }
        size_t end = off + pg; /* a run of pages with data */
        while (end < a->map_size && memcmp((char *)a->base + end, zero, pg) != 0)
            end += pg;
        while (ok && off < end) {
            ssize_t n = pwrite(fd, (char *)a->base + off, end - off, (off_t)off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                ok = 0;
            else
                off += (size_t)n;
        }
    }
    if (!ok || mmap((void *)a->base, a->map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                    fd, 0) == MAP_FAILED) {
        close(fd);
        return -1;
    }
    a->fd = fd;
    return 0;
}

static CUresult get_handle(CUipcMemHandle *out, CUdeviceptr dptr)
{
    CUresult injected = sim_inject_take("cuIpcGetMemHandle");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ctx *c;
    CUresult rc = sim_ctx_get(&c);
    struct sim_alloc *a = rc == CUDA_SUCCESS ? sim_mem_find_locked((uintptr_t)dptr) : NULL;
    if (rc == CUDA_SUCCESS && a && a->fd < 0 && sim_g.pending_ops) {
        /* queued copies may still write the pages being moved */
        uintptr_t base = a->base;
        sim_wait_all_idle_locked();
        a = sim_hmap_get(&sim_g.allocs, base, SIM_H_ALLOC);
    }
    /* virtual memory (no allocation here), stream-ordered, managed, host
     * and opened memory are not legacy-IPC capable */
    if (rc == CUDA_SUCCESS && (!a || a->kind != SIM_MEM_DEVICE || a->from_pool || a->ipc_opens))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && a->fd < 0 && make_shareable_locked(a) != 0)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    struct stat st;
    if (rc == CUDA_SUCCESS && fstat(a->fd, &st) != 0)
        rc = CUDA_ERROR_OPERATING_SYSTEM;
    if (rc == CUDA_SUCCESS) {
        struct ipc_handle h;
        memset(&h, 0, sizeof h);
        h.magic = IPC_MAGIC;
        h.pid = (int32_t)getpid();
        h.start_time = sim_pid_start_time(getpid());
        h.fd = a->fd;
        h.dev = sim_dev_phys(a->dev); /* the machine's: the other may number it otherwise */
        h.ino = (uint64_t)st.st_ino;
        h.size = a->size;
        h.map_size = a->map_size;
        h.id = a->id;
        memset(out, 0, sizeof *out);
        memcpy(out->reserved, &h, sizeof h);
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    SIM_GATED(get_handle(pHandle, dptr));
}

/* The exporter's descriptor, if it is still the memory of the handle. */
static int take_fd(const struct ipc_handle *h)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
    if (fd < 0) { /* no /proc: the pidfd way (needs ptrace rights) */
        int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)h->pid, 0);
        if (pidfd >= 0) {
            fd = (int)syscall(SYS_pidfd_getfd, pidfd, h->fd, 0);
            close(pidfd);
            if (fd >= 0)
                fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
    }
#endif
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != h->ino ||
                    (uint64_t)st.st_size < h->map_size)) {
        close(fd); /* freed, and the number reused */
        fd = -1;
    }
    return fd;
}

struct find_open {
    const struct ipc_handle *h;
    struct sim_alloc *found;
};

static void find_open_one(void *val, void *arg)
{
    struct sim_alloc *a = val;
    struct find_open *f = arg;
    if (a->ipc_opens && a->ipc_pid == f->h->pid && a->ipc_start == f->h->start_time &&
        a->ipc_id == f->h->id)
        f->found = a;
}

static CUresult open_handle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    CUresult injected = sim_inject_take("cuIpcOpenMemHandle");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    struct ipc_handle h;
    memcpy(&h, handle.reserved, sizeof h);
    if (h.magic != IPC_MAGIC || h.pid <= 0 || h.map_size < h.size || h.size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (h.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* as the real driver: not in the same process */
    if (sim_dev_of_phys(h.dev) < 0)
        return CUDA_ERROR_INVALID_VALUE; /* a device this process does not see */
    sim_shm_lock();
    struct sim_proc *p = sim_proc_find_locked(h.pid);
    int exporter_alive = p && p->start_time == h.start_time;
    sim_shm_unlock();
    if (!exporter_alive)
        return CUDA_ERROR_INVALID_VALUE; /* gone, or of another simulated machine */
    sim_lock();
    struct sim_ctx *c;
    CUresult rc = sim_ctx_get(&c);
    struct find_open f = {&h, NULL};
    if (rc == CUDA_SUCCESS)
        sim_hmap_each(&sim_g.allocs, SIM_H_ALLOC, find_open_one, &f);
    if (rc == CUDA_SUCCESS && f.found) {
        /* open already: the same pointer, one more reference (documented) */
        f.found->ipc_opens++;
        *pdptr = (CUdeviceptr)f.found->base;
        sim_unlock();
        return CUDA_SUCCESS;
    }
    sim_unlock();
    if (rc != CUDA_SUCCESS)
        return rc;
    int fd = take_fd(&h);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE; /* freed by the exporter */
    void *base = mmap(NULL, h.map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED)
        return CUDA_ERROR_MAP_FAILED;
    struct sim_alloc *a = calloc(1, sizeof *a);
    sim_lock();
    if (a) {
        a->base = (uintptr_t)base;
        a->size = h.size;
        a->map_size = h.map_size;
        a->dev = sim_dev_of_phys(h.dev);
        a->kind = SIM_MEM_DEVICE;
        a->id = sim_new_id();
        a->fd = -1;
        a->ipc_opens = 1;
        a->ipc_pid = h.pid;
        a->ipc_start = h.start_time;
        a->ipc_id = h.id;
        a->ctx = c;
        if (sim_hmap_put(&sim_g.allocs, a->base, SIM_H_ALLOC, a) != 0) {
            free(a);
            a = NULL;
        }
    }
    sim_unlock();
    if (!a) {
        munmap(base, h.map_size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pdptr = (CUdeviceptr)a->base;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                          unsigned int Flags)
{
    SIM_GATED(open_handle(pdptr, handle, Flags));
}

SIM_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                       unsigned int Flags)
{
    SIM_GATED(open_handle(pdptr, handle, Flags));
}

static CUresult close_handle(CUdeviceptr dptr)
{
    sim_lock();
    struct sim_ctx *c;
    CUresult rc = sim_ctx_get(&c);
    struct sim_alloc *a =
        rc == CUDA_SUCCESS ? sim_hmap_get(&sim_g.allocs, (uintptr_t)dptr, SIM_H_ALLOC) : NULL;
    if (rc == CUDA_SUCCESS && (!a || !a->ipc_opens))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && --a->ipc_opens == 0) {
        if (sim_g.pending_ops) {
            sim_wait_all_idle_locked(); /* queued copies may still use it */
            a = sim_hmap_get(&sim_g.allocs, (uintptr_t)dptr, SIM_H_ALLOC);
        }
        if (a && a->ipc_opens == 0) /* not reopened (or freed) meanwhile */
            sim_mem_release_locked(a);
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    SIM_GATED(close_handle(dptr));
}
