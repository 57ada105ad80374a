/*
 * sim_memory.c - device, managed and pinned-host allocations.  Each one is
 * a real anonymous mapping (MAP_NORESERVE), so a device pointer is an
 * ordinary address that copies and sets use directly (unified addressing).
 * Device and managed allocations are counted against the shared capacity,
 * rounded up to SIM_ALLOC_ROUND (512) bytes; host allocations are not:
 * they are charged to the host's memory instead (sim_host.c).
 * The checkpoint half parks the contents in malloc'ed memory and leaves
 * the address range reserved (PROT_NONE) so restore maps it back in place.
 *
 * Lock order everywhere: sim_g.mu before the segment mutex.
 */
#include "sim_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t page_round(size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

uint64_t sim_new_id(void)
{
    static _Atomic uint64_t next;
    return atomic_fetch_add(&next, 1) + 1;
}

CUresult sim_mem_alloc_locked(struct sim_ctx *ctx, size_t size, int kind, int low32,
                              CUdeviceptr *out)
{
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t map = page_round(size);
    if (map < size || size > (1ULL << 47))
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t acc = kind == SIM_MEM_HOST ? 0 : sim_round_up(size, SIM_ALLOC_ROUND);
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    if (low32) {
#ifdef MAP_32BIT
        flags |= MAP_32BIT;
#else
        return CUDA_ERROR_NOT_SUPPORTED;
#endif
    }
    /* pinned host memory takes the host's RAM (page by page, as pinning does) */
    uint64_t host = kind == SIM_MEM_HOST ? map : 0;
    if (acc) {
        CUresult rc = sim_capacity_reserve(ctx->dev, acc);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    if (host) {
        CUresult rc = sim_host_charge(host);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    void *p = mmap(NULL, map, PROT_READ | PROT_WRITE, flags, -1, 0);
    struct sim_alloc *a = p == MAP_FAILED ? NULL : calloc(1, sizeof *a);
    if (a) {
        a->base = (uintptr_t)p;
        a->size = size;
        a->map_size = map;
        a->accounted = acc;
        a->host_charged = host;
        a->dev = ctx->dev;
        a->kind = kind;
        a->id = sim_new_id();
        a->fd = -1;
        a->ctx = ctx;
        if (sim_hmap_put(&sim_g.allocs, a->base, SIM_H_ALLOC, a) != 0) {
            free(a);
            a = NULL;
        }
    }
    if (!a) {
        if (p != MAP_FAILED)
            munmap(p, map);
        if (acc)
            sim_capacity_release(ctx->dev, acc);
        if (host)
            sim_host_uncharge(host);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (kind == SIM_MEM_MANAGED)
        sim_g.managed_count++;
    *out = (CUdeviceptr)a->base;
    return CUDA_SUCCESS;
}

void sim_mem_release_locked(struct sim_alloc *a)
{
    sim_hmap_del(&sim_g.allocs, a->base, SIM_H_ALLOC);
    munmap((void *)a->base, a->map_size);
    if (a->fd >= 0)
        close(a->fd);
    if (a->accounted)
        sim_capacity_release(a->dev, a->accounted);
    if (a->host_charged)
        sim_host_uncharge(a->host_charged);
    if (a->kind == SIM_MEM_MANAGED)
        sim_g.managed_count--;
    free(a->saved);
    free(a);
}

int sim_mem_is_ipc(const struct sim_alloc *a)
{
    return a->fd >= 0 || a->ipc_opens > 0;
}

/* cuMemFree* take what the allocation entry points gave; memory opened
 * with cuIpcOpenMemHandle is closed with cuIpcCloseMemHandle. */
static int kind_matches(const struct sim_alloc *a, int kind)
{
    if (a->ipc_opens)
        return 0;
    if (kind == SIM_MEM_HOST)
        return a->kind == SIM_MEM_HOST;
    return a->kind == SIM_MEM_DEVICE || a->kind == SIM_MEM_MANAGED;
}

/* cuMemFree and cuMemFreeHost: the memory may still be used by queued
 * copies, so (like the real driver) wait for the process' queued work. */
CUresult sim_mem_free_locked(CUdeviceptr p, int kind)
{
    struct sim_alloc *a = sim_hmap_get(&sim_g.allocs, (uintptr_t)p, SIM_H_ALLOC);
    if (!a || !kind_matches(a, kind))
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_g.pending_ops) {
        sim_wait_all_idle_locked();
        a = sim_hmap_get(&sim_g.allocs, (uintptr_t)p, SIM_H_ALLOC);
        if (!a || !kind_matches(a, kind))
            return CUDA_ERROR_INVALID_VALUE; /* freed by another thread meanwhile */
    }
    sim_mem_release_locked(a);
    return CUDA_SUCCESS;
}

struct find_arg {
    uintptr_t p;
    struct sim_alloc *found;
};

static void find_one(void *val, void *arg)
{
    struct sim_alloc *a = val;
    struct find_arg *f = arg;
    if (f->p >= a->base && f->p < a->base + a->size)
        f->found = a;
}

struct sim_alloc *sim_mem_find_locked(uintptr_t p)
{
    struct sim_alloc *a = sim_hmap_get(&sim_g.allocs, p, SIM_H_ALLOC);
    if (a)
        return a;
    struct find_arg f = {p, NULL};
    sim_hmap_each(&sim_g.allocs, SIM_H_ALLOC, find_one, &f);
    return f.found;
}

/* All allocations (of a context, or of the kinds in mask) as an array. */
struct collect {
    struct sim_alloc **v;
    size_t n, cap;
    struct sim_ctx *ctx;
    int mask;
    int oom;
};

static void collect_one(void *val, void *arg)
{
    struct sim_alloc *a = val;
    struct collect *c = arg;
    if ((c->ctx && a->ctx != c->ctx) || !(c->mask & (1 << a->kind)))
        return;
    if (c->n == c->cap) {
        size_t ncap = c->cap ? c->cap * 2 : 64;
        struct sim_alloc **nv = realloc(c->v, ncap * sizeof *nv);
        if (!nv) {
            c->oom = 1;
            return;
        }
        c->v = nv;
        c->cap = ncap;
    }
    c->v[c->n++] = a;
}

void sim_mem_free_ctx_locked(struct sim_ctx *ctx)
{
    struct collect c = {.ctx = ctx, .mask = ~0};
    sim_hmap_each(&sim_g.allocs, SIM_H_ALLOC, collect_one, &c);
    for (size_t i = 0; i < c.n; i++)
        sim_mem_release_locked(c.v[i]);
    free(c.v);
}

CUresult sim_mem_checkpoint_locked(uint64_t bytes[SIM_MAX_DEVICES])
{
    if (sim_g.managed_count)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct collect c = {.mask = 1 << SIM_MEM_DEVICE};
    sim_hmap_each(&sim_g.allocs, SIM_H_ALLOC, collect_one, &c);
    if (c.oom) {
        free(c.v);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* cuda-checkpoint "does not support UVM or IPC memory" */
    for (size_t i = 0; i < c.n; i++) {
        if (sim_mem_is_ipc(c.v[i])) {
            free(c.v);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    /* first every buffer, so that a failure changes nothing */
    for (size_t i = 0; i < c.n; i++) {
        c.v[i]->saved = malloc(c.v[i]->size);
        if (!c.v[i]->saved) {
            for (size_t j = 0; j <= i; j++) {
                free(c.v[j]->saved);
                c.v[j]->saved = NULL;
            }
            free(c.v);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    for (size_t i = 0; i < c.n; i++) {
        struct sim_alloc *a = c.v[i];
        memcpy(a->saved, (void *)a->base, a->size);
        /* drop the pages but keep the range reserved for the restore */
        mmap((void *)a->base, a->map_size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        bytes[a->dev] += a->accounted;
    }
    free(c.v);
    return CUDA_SUCCESS;
}

void sim_mem_restore_locked(void)
{
    struct collect c = {.mask = 1 << SIM_MEM_DEVICE};
    sim_hmap_each(&sim_g.allocs, SIM_H_ALLOC, collect_one, &c);
    for (size_t i = 0; i < c.n; i++) {
        struct sim_alloc *a = c.v[i];
        if (!a->saved)
            continue;
        void *p = mmap((void *)a->base, a->map_size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        if (p == MAP_FAILED) {
            perror("gpushare simulated driver: restore mmap");
            continue;
        }
        memcpy(p, a->saved, a->size);
        free(a->saved);
        a->saved = NULL;
    }
    free(c.v);
}
