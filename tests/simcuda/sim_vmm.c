/*
 * sim_vmm.c - the virtual-memory-management API that PyTorch's expandable
 * segments use: address ranges are reserved PROT_NONE mappings; physical
 * allocations (cuMemCreate, counted against capacity there) are memfds, so
 * mapping one at several addresses shares the contents as on a GPU;
 * cuMemMap maps the memfd over the reserved range (read/write at once, the
 * simulator does not fault before cuMemSetAccess).  Checkpointing parks a
 * memfd's contents in host memory, closes it and re-reserves its mappings.
 */
#include "sim_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static struct sim_phys *phys_get(CUmemGenericAllocationHandle h)
{
    return sim_hmap_get(&sim_g.handles, (uintptr_t)h, SIM_H_PHYS);
}

static void phys_free_locked(struct sim_phys *ph)
{
    for (struct sim_phys **pp = &sim_g.phys; *pp; pp = &(*pp)->next) {
        if (*pp == ph) {
            *pp = ph->next;
            break;
        }
    }
    sim_hmap_del(&sim_g.handles, (uintptr_t)ph, SIM_H_PHYS);
    if (ph->fd >= 0)
        close(ph->fd);
    if (ph->accounted && !ph->saved)
        sim_capacity_release(ph->dev, ph->accounted);
    free(ph->saved);
    free(ph);
}

static struct sim_resv *resv_containing(uintptr_t p, size_t size)
{
    for (struct sim_resv *r = sim_g.resvs; r; r = r->next)
        if (p >= r->base && size <= r->size && p - r->base <= r->size - size)
            return r;
    return NULL;
}

static void reserve_none(uintptr_t va, size_t size)
{
    mmap((void *)va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
         0);
}

static void unmap_one_locked(struct sim_resv *r, struct sim_mapping *m)
{
    for (struct sim_mapping **pp = &r->maps; *pp; pp = &(*pp)->next) {
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    }
    reserve_none(m->va, m->size);
    struct sim_phys *ph = m->phys;
    free(m);
    if (--ph->maps == 0 && ph->released)
        phys_free_locked(ph);
}

/* ---- API -------------------------------------------------------------- */

static CUresult address_reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                unsigned long long flags)
{
    CUresult injected = sim_inject_take("cuMemAddressReserve");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (!ptr || size == 0 || size % SIM_GRANULARITY || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment == 0)
        alignment = SIM_GRANULARITY;
    if (alignment % SIM_GRANULARITY || (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    int base_flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    void *p = MAP_FAILED;
    if (addr && addr % alignment == 0) {
#ifdef MAP_FIXED_NOREPLACE
        p = mmap((void *)addr, size, PROT_NONE, base_flags | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != MAP_FAILED && (uintptr_t)p != addr) {
            munmap(p, size);
            p = MAP_FAILED;
        }
#endif
    }
    if (p == MAP_FAILED) {
        size_t over = size + alignment;
        char *q = mmap(NULL, over, PROT_NONE, base_flags, -1, 0);
        if (q == MAP_FAILED)
            return CUDA_ERROR_OUT_OF_MEMORY;
        uintptr_t a = sim_round_up((uintptr_t)q, alignment);
        if (a > (uintptr_t)q)
            munmap(q, a - (uintptr_t)q);
        if ((uintptr_t)q + over > a + size)
            munmap((void *)(a + size), (uintptr_t)q + over - (a + size));
        p = (void *)a;
    }
    struct sim_resv *r = calloc(1, sizeof *r);
    if (!r) {
        munmap(p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->base = (uintptr_t)p;
    r->size = size;
    sim_lock();
    r->next = sim_g.resvs;
    sim_g.resvs = r;
    sim_unlock();
    *ptr = (CUdeviceptr)r->base;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                        CUdeviceptr addr, unsigned long long flags)
{
    SIM_GATED(address_reserve(ptr, size, alignment, addr, flags));
}

static CUresult address_free(CUdeviceptr ptr, size_t size)
{
    sim_lock();
    struct sim_resv **pp = &sim_g.resvs;
    while (*pp && !((*pp)->base == ptr && (*pp)->size == size))
        pp = &(*pp)->next;
    struct sim_resv *r = *pp;
    if (!r) {
        sim_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (r->maps)
        sim_wait_all_idle_locked();
    while (r->maps)
        unmap_one_locked(r, r->maps);
    for (pp = &sim_g.resvs; *pp; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    munmap((void *)r->base, r->size);
    free(r);
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    SIM_GATED(address_free(ptr, size));
}

static CUresult mem_create(CUmemGenericAllocationHandle *handle, size_t size,
                           const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult injected = sim_inject_take("cuMemCreate");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (!handle || !prop || flags != 0 || size == 0 || size % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    struct sim_phys *ph = calloc(1, sizeof *ph);
    if (!ph)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ph->fd = -1;
    ph->size = size;
    ph->dev = prop->location.id;
    ph->accounted = size;
    sim_lock();
    CUresult rc = sim_capacity_reserve(ph->dev, size);
    if (rc == CUDA_SUCCESS) {
        ph->fd = memfd_create("gpusim-vmm", MFD_CLOEXEC);
        if (ph->fd < 0 || ftruncate(ph->fd, (off_t)size) != 0 ||
            sim_hmap_put(&sim_g.handles, (uintptr_t)ph, SIM_H_PHYS, ph) != 0) {
            if (ph->fd >= 0)
                close(ph->fd);
            sim_capacity_release(ph->dev, size);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc != CUDA_SUCCESS) {
        free(ph);
    } else {
        ph->next = sim_g.phys;
        sim_g.phys = ph;
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                const CUmemAllocationProp *prop, unsigned long long flags)
{
    SIM_GATED(mem_create(handle, size, prop, flags));
}

static CUresult mem_release(CUmemGenericAllocationHandle handle)
{
    sim_lock();
    struct sim_phys *ph = phys_get(handle);
    CUresult rc = CUDA_SUCCESS;
    if (!ph || ph->released) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        ph->released = 1;
        if (ph->maps == 0)
            phys_free_locked(ph);
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    SIM_GATED(mem_release(handle));
}

static CUresult mem_map(CUdeviceptr ptr, size_t size, size_t offset,
                        CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult injected = sim_inject_take("cuMemMap");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (flags != 0 || size == 0 || size % SIM_GRANULARITY || offset % SIM_GRANULARITY ||
        ptr % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    struct sim_phys *ph = phys_get(handle);
    struct sim_resv *r = resv_containing(ptr, size);
    if (!ph || ph->released) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else if (!r || offset > ph->size || size > ph->size - offset) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        for (struct sim_mapping *m = r->maps; m; m = m->next)
            if (ptr < m->va + m->size && m->va < ptr + size)
                rc = CUDA_ERROR_INVALID_VALUE; /* already mapped */
    }
    struct sim_mapping *m = NULL;
    if (rc == CUDA_SUCCESS) {
        m = calloc(1, sizeof *m);
        if (!m || mmap((void *)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, ph->fd,
                       (off_t)offset) == MAP_FAILED) {
            if (m)
                reserve_none(ptr, size);
            free(m);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc == CUDA_SUCCESS) {
        m->va = ptr;
        m->size = size;
        m->offset = offset;
        m->prot = PROT_READ | PROT_WRITE;
        m->phys = ph;
        m->next = r->maps;
        r->maps = m;
        ph->maps++;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                             CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    SIM_GATED(mem_map(ptr, size, offset, handle, flags));
}

static CUresult mem_unmap(CUdeviceptr ptr, size_t size)
{
    CUresult injected = sim_inject_take("cuMemUnmap");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_resv *r = resv_containing(ptr, size);
    int found = 0;
    CUresult rc = CUDA_SUCCESS;
    if (r) {
        for (struct sim_mapping *m = r->maps; m; m = m->next) {
            if (m->va >= ptr && m->va + m->size <= ptr + size)
                found++;
            else if (ptr < m->va + m->size && m->va < ptr + size)
                rc = CUDA_ERROR_INVALID_VALUE; /* would split a mapping */
        }
    }
    if (!found)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        if (sim_g.pending_ops)
            sim_wait_all_idle_locked();
        r = resv_containing(ptr, size);
        for (struct sim_mapping *m = r ? r->maps : NULL, *nx; m; m = nx) {
            nx = m->next;
            if (m->va >= ptr && m->va + m->size <= ptr + size)
                unmap_one_locked(r, m);
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    SIM_GATED(mem_unmap(ptr, size));
}

static CUresult set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    CUresult injected = sim_inject_take("cuMemSetAccess");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (!desc || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int prot = PROT_NONE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return CUDA_ERROR_INVALID_VALUE;
        if (!sim_dev_valid(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            prot = PROT_READ | PROT_WRITE;
        else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
            prot = PROT_READ;
        else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
                 desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ)
            return CUDA_ERROR_INVALID_VALUE;
    }
    sim_lock();
    struct sim_resv *r = resv_containing(ptr, size);
    size_t covered = 0;
    for (struct sim_mapping *m = r ? r->maps : NULL; m; m = m->next) {
        uintptr_t lo = m->va > ptr ? m->va : ptr;
        uintptr_t hi = m->va + m->size < ptr + size ? m->va + m->size : ptr + size;
        if (lo < hi)
            covered += hi - lo;
    }
    CUresult rc = covered == size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        for (struct sim_mapping *m = r->maps; m; m = m->next) {
            uintptr_t lo = m->va > ptr ? m->va : ptr;
            uintptr_t hi = m->va + m->size < ptr + size ? m->va + m->size : ptr + size;
            if (lo < hi) {
                mprotect((void *)lo, hi - lo, prot);
                m->prot = prot;
            }
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                   size_t count)
{
    SIM_GATED(set_access(ptr, size, desc, count));
}

static CUresult granularity(size_t *gran, const CUmemAllocationProp *prop,
                            CUmemAllocationGranularity_flags option)
{
    if (!gran || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
        option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && !sim_dev_valid(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    *gran = SIM_GRANULARITY;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity_out,
                                                  const CUmemAllocationProp *prop,
                                                  CUmemAllocationGranularity_flags option)
{
    SIM_GATED(granularity(granularity_out, prop, option));
}

static CUresult props_from_handle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_phys *ph = phys_get(handle);
    if (ph) {
        memset(prop, 0, sizeof *prop);
        prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop->location.id = ph->dev;
    }
    sim_unlock();
    return ph ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                           CUmemGenericAllocationHandle handle)
{
    SIM_GATED(props_from_handle(prop, handle));
}

/* ---- checkpoint ------------------------------------------------------- */

CUresult sim_vmm_checkpoint_locked(uint64_t bytes[SIM_MAX_DEVICES])
{
    for (struct sim_phys *ph = sim_g.phys; ph; ph = ph->next) {
        ph->saved = malloc(ph->size);
        if (!ph->saved) {
            for (struct sim_phys *q = sim_g.phys; q != ph->next; q = q->next) {
                free(q->saved);
                q->saved = NULL;
            }
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    for (struct sim_phys *ph = sim_g.phys; ph; ph = ph->next) {
        size_t done = 0;
        while (done < ph->size) {
            ssize_t n = pread(ph->fd, (char *)ph->saved + done, ph->size - done, (off_t)done);
            if (n <= 0) {
                if (n < 0 && errno == EINTR)
                    continue;
                memset((char *)ph->saved + done, 0, ph->size - done);
                break;
            }
            done += (size_t)n;
        }
    }
    for (struct sim_resv *r = sim_g.resvs; r; r = r->next)
        for (struct sim_mapping *m = r->maps; m; m = m->next)
            reserve_none(m->va, m->size);
    for (struct sim_phys *ph = sim_g.phys; ph; ph = ph->next) {
        close(ph->fd);
        ph->fd = -1;
        bytes[ph->dev] += ph->accounted;
    }
    return CUDA_SUCCESS;
}

CUresult sim_vmm_restore_locked(void)
{
    CUresult rc = CUDA_SUCCESS;
    for (struct sim_phys *ph = sim_g.phys; ph; ph = ph->next) {
        if (!ph->saved)
            continue;
        ph->fd = memfd_create("gpusim-vmm", MFD_CLOEXEC);
        size_t done = 0;
        if (ph->fd >= 0 && ftruncate(ph->fd, (off_t)ph->size) == 0) {
            while (done < ph->size) {
                ssize_t n = pwrite(ph->fd, (char *)ph->saved + done, ph->size - done, (off_t)done);
                if (n <= 0) {
                    if (n < 0 && errno == EINTR)
                        continue;
                    break;
                }
                done += (size_t)n;
            }
        }
        if (done < ph->size) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            continue;
        }
        free(ph->saved);
        ph->saved = NULL;
    }
    for (struct sim_resv *r = sim_g.resvs; r; r = r->next) {
        for (struct sim_mapping *m = r->maps; m; m = m->next) {
            if (m->phys->fd < 0 || mmap((void *)m->va, m->size, m->prot, MAP_SHARED | MAP_FIXED,
                                        m->phys->fd, (off_t)m->offset) == MAP_FAILED)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    return rc;
}
