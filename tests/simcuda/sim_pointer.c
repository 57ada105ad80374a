/*
 * sim_pointer.c - what the driver says about a pointer: cuPointerGetAttribute
 * and cuPointerGetAttributes, and the lookup cuMemGetAddressRange shares.
 *
 * As on the real driver: for memory from cuMemAlloc the range is the
 * allocation (as requested) and it is legacy-IPC capable; for a VMM
 * mapping the range is the mapping and it is not (cuIpcGetMemHandle does
 * not work on it).  cuPointerGetAttribute fails with
 * CUDA_ERROR_INVALID_VALUE for a pointer the driver does not know;
 * cuPointerGetAttributes does not fail then, it fills default values
 * (documented behaviour).  Attributes the simulator does not model give
 * CUDA_ERROR_NOT_SUPPORTED.
 */
#include "sim_internal.h"

#include <string.h>

struct sim_pointer {
    uintptr_t base;
    size_t size;
    int dev;
    int kind; /* SIM_MEM_*, or 0 for a VMM mapping */
    struct sim_ctx *ctx;
};

/* sim_g.mu held. */
int sim_pointer_find_locked(uintptr_t p, uintptr_t *base, size_t *size)
{
    struct sim_alloc *a = sim_mem_find_locked(p);
    if (a) {
        *base = a->base;
        *size = a->size;
        return 1;
    }
    for (struct sim_resv *r = sim_g.resvs; r; r = r->next)
        for (struct sim_mapping *m = r->maps; m; m = m->next)
            if (p >= m->va && p - m->va < m->size) {
                *base = m->va;
                *size = m->size;
                return 2;
            }
    return 0;
}

static int find(uintptr_t p, struct sim_pointer *out)
{
    memset(out, 0, sizeof *out);
    struct sim_alloc *a = sim_mem_find_locked(p);
    if (a) {
        *out = (struct sim_pointer){a->base, a->size, a->dev, a->kind, a->ctx};
        return 1;
    }
    for (struct sim_resv *r = sim_g.resvs; r; r = r->next)
        for (struct sim_mapping *m = r->maps; m; m = m->next)
            if (p >= m->va && p - m->va < m->size) {
                *out = (struct sim_pointer){m->va, m->size, m->phys ? m->phys->dev : 0, 0, NULL};
                return 1;
            }
    return 0;
}

static CUresult attribute(const struct sim_pointer *w, CUpointer_attribute a, void *data,
                          uintptr_t p)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = (CUcontext)w->ctx;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = w->kind == SIM_MEM_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = (CUdeviceptr)p;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned *)data = w->kind == SIM_MEM_MANAGED;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = w->dev;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)w->base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = w->size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(int *)data = 1;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(int *)data = w->kind == SIM_MEM_DEVICE;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

static CUresult get_attribute(void *data, CUpointer_attribute a, CUdeviceptr ptr)
{
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_pointer w;
    CUresult rc = find((uintptr_t)ptr, &w) ? attribute(&w, a, data, (uintptr_t)ptr)
                                           : CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute_,
                                          CUdeviceptr ptr)
{
    SIM_GATED(get_attribute(data, attribute_, ptr));
}

static CUresult get_attributes(unsigned n, CUpointer_attribute *attrs, void **data, CUdeviceptr ptr)
{
    if (!attrs || !data)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_pointer w;
    int known = find((uintptr_t)ptr, &w);
    CUresult rc = CUDA_SUCCESS;
    for (unsigned i = 0; i < n && rc == CUDA_SUCCESS; i++) {
        if (!data[i])
            continue;
        if (known) {
            rc = attribute(&w, attrs[i], data[i], (uintptr_t)ptr);
            continue;
        }
        /* Not a CUDA pointer: defaults, and success. */
        struct sim_pointer none = {0};
        rc = attribute(&none, attrs[i], data[i], 0);
        if (rc == CUDA_SUCCESS && attrs[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
            *(unsigned *)data[i] = 0;
        if (rc == CUDA_SUCCESS && attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
            *(int *)data[i] = -2; /* what the driver reports for host memory */
        if (rc == CUDA_SUCCESS && attrs[i] == CU_POINTER_ATTRIBUTE_MAPPED)
            *(int *)data[i] = 0;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                           CUpointer_attribute *attributes, void **data,
                                           CUdeviceptr ptr)
{
    SIM_GATED(get_attributes(numAttributes, attributes, data, ptr));
}
