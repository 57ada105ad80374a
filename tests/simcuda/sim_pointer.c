/*
 * sim_pointer.c - cuPointerGetAttribute and cuPointerGetAttributes for
 * every kind of memory the simulator has: cuMemAlloc-family allocations
 * (device, managed, pinned host) and virtual-memory mappings (device or
 * host physical memory).
 *
 * As documented: for virtual memory RANGE_START_ADDR/RANGE_SIZE are the
 * reservation ("not necessarily the address of the mapped region, but the
 * address of the mappable address range"), answered also where nothing is
 * mapped (MAPPED 0); MAPPING_BASE_ADDR/MAPPING_SIZE are the mapping.
 * cuPointerGetAttribute fails with CUDA_ERROR_INVALID_VALUE for a pointer
 * that is no CUDA memory; cuPointerGetAttributes gives default values and
 * succeeds.  The value sizes are those of NVIDIA's cuda-python bindings:
 * booleans one byte, MEMORY_TYPE/DEVICE_ORDINAL/ALLOWED_HANDLE_TYPES/
 * ACCESS_FLAGS unsigned int, ids unsigned long long, sizes size_t.
 */
#include "sim_internal.h"

#include <string.h>

struct ptr_info {
    int known;  /* allocated memory or a mapping: all attributes answer */
    int in_vmm; /* in a reservation (maybe unmapped) */
    int mapped;
    CUmemorytype type;
    struct sim_ctx *ctx;
    int dev;
    int managed;
    int legacy_ipc;
    int host_ok; /* the host may use the address */
    uintptr_t range_base, map_base;
    size_t range_size, map_size;
    uint64_t buffer_id, block_id;
    unsigned int handle_types;
    unsigned int access_rw; /* granted to the current context's device */
    int has_ctx;            /* a current context */
};

static void lookup_locked(uintptr_t p, struct ptr_info *pi)
{
    memset(pi, 0, sizeof *pi);
    pi->dev = CU_DEVICE_INVALID;
    struct sim_alloc *a = sim_mem_find_locked(p);
    struct sim_ctx *cur = NULL;
    pi->has_ctx = sim_ctx_get(&cur) == CUDA_SUCCESS;
    if (a) {
        pi->known = pi->mapped = 1;
        pi->type = a->kind == SIM_MEM_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        pi->ctx = a->ctx;
        pi->dev = a->dev;
        pi->managed = a->kind == SIM_MEM_MANAGED;
        pi->legacy_ipc = a->kind == SIM_MEM_DEVICE && !a->from_pool && !a->ipc_opens;
        pi->host_ok = a->kind != SIM_MEM_DEVICE;
        pi->range_base = pi->map_base = a->base;
        pi->range_size = pi->map_size = a->size;
        pi->buffer_id = pi->block_id = a->id;
        pi->access_rw = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        return;
    }
    struct sim_mapping *m;
    struct sim_resv *r = sim_vmm_resv_locked(p, &m);
    if (!r)
        return;
    pi->in_vmm = 1;
    pi->range_base = r->base;
    pi->range_size = r->size;
    if (!m)
        return;
    struct sim_phys *ph = m->phys;
    pi->known = pi->mapped = 1;
    pi->type = ph->loc == SIM_LOC_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    pi->dev = ph->loc == SIM_LOC_HOST ? CU_DEVICE_CPU : ph->dev;
    pi->host_ok = ph->loc == SIM_LOC_HOST;
    pi->map_base = m->va;
    pi->map_size = m->size;
    pi->buffer_id = pi->block_id = ph->id;
    pi->handle_types = (unsigned int)ph->handle_types;
    pi->access_rw = cur ? m->access[cur->dev] : 0;
}

static void put_bool(void *data, int v)
{
    *(unsigned char *)data = v ? 1 : 0;
}

static void put_uint(void *data, unsigned int v)
{
    memcpy(data, &v, sizeof v);
}

/* One attribute.  strict: cuPointerGetAttribute (errors for memory that
 * has no such value); else cuPointerGetAttributes (defaults). */
static CUresult get_one(const struct ptr_info *pi, CUpointer_attribute attr, void *data,
                        CUdeviceptr ptr, int strict)
{
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    int known = pi->known;
    if (strict && !known &&
        !(pi->in_vmm &&
          (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
           attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE || attr == CU_POINTER_ATTRIBUTE_MAPPED)))
        return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = (CUcontext)pi->ctx; /* NULL for virtual memory */
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        put_uint(data, (unsigned int)pi->type);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = known ? ptr : 0; /* unified addressing */
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (strict && !pi->host_ok)
            return CUDA_ERROR_INVALID_VALUE; /* device memory has no host address */
        *(void **)data = pi->host_ok ? (void *)(uintptr_t)ptr : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        put_bool(data, 0);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = pi->buffer_id;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = pi->block_id;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        put_bool(data, pi->managed);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        put_uint(data, (unsigned int)pi->dev);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        put_bool(data, pi->legacy_ipc);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)pi->range_base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = pi->range_size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        put_bool(data, pi->mapped);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        put_uint(data, pi->handle_types);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        put_uint(data, 0);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        if (known && !pi->has_ctx)
            return CUDA_ERROR_INVALID_CONTEXT; /* "the current context's device" */
        put_uint(data, pi->access_rw);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = NULL; /* the simulator's pools hold nothing */
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = pi->map_size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(void **)data = (void *)pi->map_base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        put_bool(data, 0);
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
        return CUDA_ERROR_NOT_SUPPORTED; /* no nv-p2p kernel interface */
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult get_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    struct ptr_info pi;
    sim_lock();
    lookup_locked((uintptr_t)ptr, &pi);
    sim_unlock();
    return get_one(&pi, attr, data, ptr, 1);
}

SIM_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                          CUdeviceptr ptr)
{
    SIM_GATED(get_attribute(data, attribute, ptr));
}

static CUresult get_attributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                               CUdeviceptr ptr)
{
    if (n == 0 || !attrs || !data)
        return CUDA_ERROR_INVALID_VALUE;
    struct ptr_info pi;
    sim_lock();
    lookup_locked((uintptr_t)ptr, &pi);
    sim_unlock();
    for (unsigned int i = 0; i < n; i++) {
        CUresult rc = get_one(&pi, attrs[i], data[i], ptr, 0);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                           CUpointer_attribute *attributes, void **data,
                                           CUdeviceptr ptr)
{
    SIM_GATED(get_attributes(numAttributes, attributes, data, ptr));
}
