/*
 * hook_mem.h - the memory this process holds on each GPU, as the memory
 * wrappers (hook_mem_wrap.c) report it, and the optional limit.  A wrapper
 * brackets the real call: admit and settle around an allocation, a begin
 * and an end around a free, a release or an unmap.
 */
#ifndef GS_HOOK_MEM_H
#define GS_HOOK_MEM_H

#include "hook_cuda.h"

#include <stddef.h>
#include <stdint.h>

enum hook_mem_kind { HOOK_MEM_DEVICE = 1, HOOK_MEM_MANAGED, HOOK_MEM_PHYS, HOOK_MEM_MAP };

/* What the maps hold for a pointer, handle or mapped address; callers
 * only carry it from a begin to its end. */
struct hook_mem_entry {
    uint64_t size;
    uint64_t handle; /* HOOK_MEM_MAP: the physical allocation mapped there */
    CUcontext ctx;   /* HOOK_MEM_DEVICE/MANAGED: freed with this context */
    int32_t dev;
    uint8_t kind;
    uint8_t released; /* HOOK_MEM_PHYS: cuMemRelease called while still mapped */
    uint32_t maps;    /* HOOK_MEM_PHYS: live mappings */
};

/* Where an allocation goes (dev -1: not counted). */
struct hook_mem_where {
    CUcontext ctx;
    int dev;
};

/* Before an allocation of `bytes`: reserves it under GPUSHARE_MEMORY_LIMIT,
 * or CUDA_ERROR_OUT_OF_MEMORY when it would not fit. */
CUresult hook_mem_admit(const struct hook_mem_where *w, uint64_t bytes);
/* After it: counts what was allocated at key (r == CUDA_SUCCESS; a handle
 * for HOOK_MEM_PHYS, else a pointer) and drops the reservation. */
void hook_mem_settle(const struct hook_mem_where *w, uint64_t reserved, CUresult r, uint64_t key,
                     uint64_t size, enum hook_mem_kind kind);

/* A free of pointer p: taken out before the real call (1 when it was
 * counted), and gone or put back after it. */
int hook_mem_free_begin(CUdeviceptr p, struct hook_mem_entry *v);
void hook_mem_free_end(CUdeviceptr p, const struct hook_mem_entry *v, int had, CUresult r);

/* The virtual memory API: a mapping of handle at ptr (after a successful
 * cuMemMap); cuMemRelease and cuMemUnmap around the real call. */
void hook_mem_mapped(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle);
struct hook_mem_release {
    struct hook_mem_entry v;
    int had, mapped;
};
void hook_mem_release_begin(CUmemGenericAllocationHandle handle, struct hook_mem_release *rel);
void hook_mem_release_end(CUmemGenericAllocationHandle handle, const struct hook_mem_release *rel,
                          CUresult r);
#define HOOK_MEM_MAX_UNMAP 64
struct hook_mem_unmap {
    size_t n;
    uint64_t keys[HOOK_MEM_MAX_UNMAP];
    struct hook_mem_entry maps[HOOK_MEM_MAX_UNMAP];
};
void hook_mem_unmap_begin(CUdeviceptr ptr, size_t size, struct hook_mem_unmap *u);
void hook_mem_unmap_end(const struct hook_mem_unmap *u, CUresult r);

/* With a limit, device dev looks as large as the limit (either pointer may
 * be NULL). */
void hook_mem_limited(int dev, uint64_t *freeb, uint64_t *total);

/* Called when a device's footprint changes first since it was last taken
 * (the broker client wakes its I/O thread). */
void hook_mem_set_notify(void (*fn)(void));
/* A snapshot of device dev's footprint when it changed since the last one
 * (clears the change); 0 when unchanged. */
int hook_mem_take(int dev, uint64_t *used, uint64_t *managed, uint64_t *peak);
uint64_t hook_mem_changed_mask(void); /* bit d: device d changed */
/* Marks every device with a footprint as changed (a new broker). */
void hook_mem_mark_all(void);
/* dev's footprint now, without touching the change mark; -1 for a bad
 * device. */
int hook_mem_footprint(int dev, uint64_t *used, uint64_t *managed, uint64_t *peak);
/* Whatever a destroyed context held is gone with it. */
void hook_mem_forget_ctx(CUcontext ctx);
void hook_mem_atfork_prepare(void);
void hook_mem_atfork_parent(void);
void hook_mem_atfork_child(void);

#endif
