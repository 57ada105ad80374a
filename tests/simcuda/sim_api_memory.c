/*
 * sim_api_memory.c - the allocation entry points (cuMemAlloc*, cuMemFree*,
 * host and managed memory, stream-ordered allocation, cuMemGetInfo) and
 * their legacy 32-bit ABI versions.  The work is in sim_memory.c.
 */
#include "sim_internal.h"

#include <limits.h>

static CUresult alloc_current(CUdeviceptr *dptr, size_t size, int kind, int low32)
{
    CUresult injected = kind == SIM_MEM_HOST ? CUDA_SUCCESS : sim_inject_take("cuMemAlloc");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ctx *c;
    CUresult rc = sim_ctx_get(&c);
    if (rc == CUDA_SUCCESS)
        rc = sim_mem_alloc_locked(c, size, kind, low32, dptr);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    SIM_GATED(alloc_current(dptr, bytesize, SIM_MEM_DEVICE, 0));
}

/* The 32-bit ABI: the allocation is placed below 4 GiB (MAP_32BIT). */
static CUresult alloc_v1(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    CUresult rc = alloc_current(&p, bytesize, SIM_MEM_DEVICE, 1);
    if (rc == CUDA_SUCCESS) {
        if (p > UINT_MAX) {
            sim_lock();
            sim_mem_free_locked(p, SIM_MEM_DEVICE);
            sim_unlock();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *dptr = (CUdeviceptr_v1)p;
    }
    return rc;
}

SIM_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    SIM_GATED(alloc_v1(dptr, bytesize));
}

static CUresult alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                            unsigned int elsize)
{
    if (!dptr || !pitch || width == 0 || height == 0 ||
        (elsize != 4 && elsize != 8 && elsize != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t p = (size_t)sim_round_up(width, 512);
    if (height > SIZE_MAX / p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = alloc_current(dptr, p * height, SIM_MEM_DEVICE, 0);
    if (rc == CUDA_SUCCESS)
        *pitch = p;
    return rc;
}

SIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                       size_t Height, unsigned int ElementSizeBytes)
{
    SIM_GATED(alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
}

static CUresult alloc_pitch_v1(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int width,
                               unsigned int height, unsigned int elsize)
{
    if (!dptr || !pitch || width == 0 || height == 0 ||
        (elsize != 4 && elsize != 8 && elsize != 16))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long p = sim_round_up(width, 512);
    if (p * height > UINT_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = alloc_v1(dptr, (unsigned int)(p * height));
    if (rc == CUDA_SUCCESS)
        *pitch = (unsigned int)p;
    return rc;
}

SIM_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                    unsigned int WidthInBytes, unsigned int Height,
                                    unsigned int ElementSizeBytes)
{
    SIM_GATED(alloc_pitch_v1(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
}

static CUresult free_current(CUdeviceptr p, int kind)
{
    if (p == 0)
        return CUDA_SUCCESS;
    sim_lock();
    CUresult rc = sim_mem_free_locked(p, kind);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    SIM_GATED(free_current(dptr, SIM_MEM_DEVICE));
}

SIM_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    SIM_GATED(free_current(dptr, SIM_MEM_DEVICE));
}

static CUresult mem_info(size_t *freeb, size_t *total)
{
    sim_lock();
    struct sim_ctx *c;
    CUresult rc = sim_ctx_get(&c);
    sim_unlock();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_shm_lock();
    sim_reclaim_dead_locked();
    uint64_t cap = sim_seg->capacity, used = sim_seg->used[sim_dev_phys(c->dev)];
    sim_shm_unlock();
    if (freeb)
        *freeb = (size_t)(used < cap ? cap - used : 0);
    if (total)
        *total = (size_t)cap;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    SIM_GATED(mem_info(free_bytes, total));
}

static CUresult mem_info_v1(unsigned int *freeb, unsigned int *total)
{
    size_t f, t;
    CUresult rc = mem_info(&f, &t);
    if (rc == CUDA_SUCCESS) {
        if (freeb)
            *freeb = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
        if (total)
            *total = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
    }
    return rc;
}

SIM_EXPORT CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total)
{
    SIM_GATED(mem_info_v1(free_bytes, total));
}

static CUresult host_alloc(void **pp, size_t size)
{
    if (!pp)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    CUresult rc = alloc_current(&p, size, SIM_MEM_HOST, 0);
    if (rc == CUDA_SUCCESS)
        *pp = (void *)p;
    return rc;
}

SIM_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    SIM_GATED(host_alloc(pp, bytesize));
}

SIM_EXPORT CUresult cuMemAllocHost(void **pp, unsigned int bytesize)
{
    SIM_GATED(host_alloc(pp, bytesize));
}

static CUresult host_alloc_flags(void **pp, size_t size, unsigned int flags)
{
    if (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                            CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, size);
}

SIM_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    SIM_GATED(host_alloc_flags(pp, bytesize, Flags));
}

SIM_EXPORT CUresult cuMemFreeHost(void *p)
{
    SIM_GATED(p ? free_current((CUdeviceptr)p, SIM_MEM_HOST) : CUDA_ERROR_INVALID_VALUE);
}

static CUresult host_device_pointer(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
    if (!pdptr || !p || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_alloc *a = sim_mem_find_locked((uintptr_t)p);
    sim_unlock();
    if (!a || a->kind != SIM_MEM_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)p; /* unified addressing */
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    SIM_GATED(host_device_pointer(pdptr, p, Flags));
}

static CUresult alloc_managed(CUdeviceptr *dptr, size_t size, unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_current(dptr, size, SIM_MEM_MANAGED, 0);
}

SIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    SIM_GATED(alloc_managed(dptr, bytesize, flags));
}

/* For virtual memory the range is the mapping that holds dptr (documented
 * under CU_POINTER_ATTRIBUTE_RANGE_SIZE: "to retrieve the size of the
 * mapped region, see cuMemGetAddressRange"), not the reservation. */
static CUresult address_range(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    sim_lock();
    uintptr_t base = 0;
    size_t size = 0;
    struct sim_alloc *a = sim_mem_find_locked((uintptr_t)dptr);
    struct sim_mapping *m = NULL;
    if (a) {
        base = a->base;
        size = a->size;
    } else if (sim_vmm_resv_locked((uintptr_t)dptr, &m) && m) {
        base = m->va;
        size = m->size;
    }
    sim_unlock();
    if (!size)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = (CUdeviceptr)base;
    if (psize)
        *psize = size;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    SIM_GATED(address_range(pbase, psize, dptr));
}

/* Stream-ordered allocation: the memory is allocated at once (earlier
 * than stream order requires, which is always safe); the free happens in
 * stream order.  Not capturable in the simulator. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream h, int pt)
{
    CUresult injected = sim_inject_take("cuMemAlloc");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve(h, pt, &s);
    if (rc == CUDA_SUCCESS && s->capture)
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (rc == CUDA_SUCCESS)
        rc = sim_mem_alloc_locked(s->ctx, size, SIM_MEM_DEVICE, 0, dptr);
    if (rc == CUDA_SUCCESS)
        ((struct sim_alloc *)sim_hmap_get(&sim_g.allocs, (uintptr_t)*dptr, SIM_H_ALLOC))
            ->from_pool = 1;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    SIM_GATED(alloc_async(dptr, bytesize, hStream, 0));
}

SIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    SIM_GATED(alloc_async(dptr, bytesize, hStream, 1));
}

/* Memory pools: a pool is only a handle here (its allocations are counted
 * like any other; what a real pool keeps cached after a free is not
 * simulated). */
struct sim_pool {
    int device;
};

static CUresult pool_create(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id < 0 ||
        props->location.id >= sim_g.cfg.devices)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_pool *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->device = props->location.id;
    sim_lock();
    int rc = sim_hmap_put(&sim_g.handles, (uintptr_t)p, SIM_H_POOL, p);
    sim_unlock();
    if (rc != 0) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    SIM_GATED(pool_create(pool, poolProps));
}

static CUresult pool_destroy(CUmemoryPool pool)
{
    sim_lock();
    struct sim_pool *p = sim_hmap_del(&sim_g.handles, (uintptr_t)pool, SIM_H_POOL);
    sim_unlock();
    free(p);
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    SIM_GATED(pool_destroy(pool));
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream h,
                                int pt)
{
    sim_lock();
    int known = sim_hmap_get(&sim_g.handles, (uintptr_t)pool, SIM_H_POOL) != NULL;
    sim_unlock();
    return known ? alloc_async(dptr, size, h, pt) : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                            CUstream hStream)
{
    SIM_GATED(alloc_from_pool(dptr, bytesize, pool, hStream, 0));
}

SIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                 CUmemoryPool pool, CUstream hStream)
{
    SIM_GATED(alloc_from_pool(dptr, bytesize, pool, hStream, 1));
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, int pt)
{
    sim_lock();
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve(h, pt, &s);
    struct sim_alloc *a = sim_hmap_get(&sim_g.allocs, (uintptr_t)dptr, SIM_H_ALLOC);
    if (rc == CUDA_SUCCESS && (!a || a->kind != SIM_MEM_DEVICE || a->ipc_opens))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && s->capture)
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    struct sim_op *op = NULL;
    if (rc == CUDA_SUCCESS && !(op = sim_op_new(SIM_OP_FREE)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        /* gone from the registry now, so it cannot be freed twice */
        sim_hmap_del(&sim_g.allocs, a->base, SIM_H_ALLOC);
        op->u.free.a = a;
        rc = sim_submit_locked(s, op);
        if (rc != CUDA_SUCCESS)
            sim_hmap_put(&sim_g.allocs, a->base, SIM_H_ALLOC, a);
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    SIM_GATED(free_async(dptr, hStream, 0));
}

SIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    SIM_GATED(free_async(dptr, hStream, 1));
}
