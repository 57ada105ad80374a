/*
 * sim_vmm.c - the virtual-memory-management API (PyTorch's expandable
 * segments, and the hook's parking of device memory): address ranges are
 * reserved PROT_NONE mappings; physical allocations (cuMemCreate) are
 * memfds, so mapping one at several addresses shares the contents as on a
 * GPU.  Device physical memory counts against capacity at cuMemCreate;
 * host memory (CU_MEM_LOCATION_TYPE_HOST_NUMA / _HOST) does not (it is
 * charged to the host's memory instead, by its creator only: an import
 * makes no new memory; sim_host.c), and needs only cuInit, no context (as
 * on a real driver).
 *
 * The real driver's rules are enforced where a program could come to rely
 * on breaking them:
 *  - cuMemMap maps PROT_NONE: a mapping has no access until cuMemSetAccess
 *    grants it, so host access faults and copies through the API fail;
 *  - mapping over a mapping, unmapping anything but whole mappings, and
 *    freeing a reservation that still has mappings fail;
 *  - a handle counts references (cuMemCreate, cuMemRetainAllocationHandle;
 *    cuMemRelease drops one) and the memory is freed when the last
 *    reference and the last mapping are gone.
 * Checkpointing parks device memfds' contents in host memory, closes them
 * and re-reserves their mappings; host memory stays where it is.
 * Exporting and importing (descriptors of these memfds) is in
 * sim_vmm_share.c.
 */
#include "sim_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static struct sim_phys *phys_get(CUmemGenericAllocationHandle h)
{
    return sim_hmap_get(&sim_g.handles, (uintptr_t)h, SIM_H_PHYS);
}

struct sim_phys *sim_phys_get_locked(CUmemGenericAllocationHandle h)
{
    return phys_get(h);
}

int sim_phys_add_locked(struct sim_phys *ph)
{
    if (sim_hmap_put(&sim_g.handles, (uintptr_t)ph, SIM_H_PHYS, ph) != 0)
        return -1;
    ph->next = sim_g.phys;
    sim_g.phys = ph;
    return 0;
}

int sim_vmm_memfd(size_t size, int loc)
{
    int fd = memfd_create(loc == SIM_LOC_DEVICE ? "gpusim-vmm" : "gpusim-vmm-host",
                          MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    /* sealed at its size: an importer can trust the trailing header */
    if (ftruncate(fd, (off_t)(size + SIM_SHARE_HDR)) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
        close(fd);
        return -1;
    }
    return fd;
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
    if (ph->host_charged)
        sim_host_uncharge(ph->host_charged);
    if (ph->share_id) {
        /* this process stops holding the shared memory with its last handle */
        int others = 0;
        for (struct sim_phys *q = sim_g.phys; q; q = q->next)
            others += q->share_id == ph->share_id;
        if (!others) {
            sim_shm_lock();
            sim_share_leave_locked(ph->share_id);
            sim_shm_unlock();
        }
    }
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

struct sim_resv *sim_vmm_resv_locked(uintptr_t p, struct sim_mapping **map)
{
    struct sim_resv *r = resv_containing(p, 1);
    *map = NULL;
    for (struct sim_mapping *m = r ? r->maps : NULL; m; m = m->next)
        if (p >= m->va && p - m->va < m->size)
            *map = m;
    return r;
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
    if (--ph->maps == 0 && ph->refs == 0)
        phys_free_locked(ph);
}

/* [ptr, ptr + size) is exactly a run of whole mappings of r, no gaps and
 * no mapping cut: the ranges cuMemUnmap and cuMemSetAccess accept. */
static int whole_mappings(const struct sim_resv *r, uintptr_t ptr, size_t size)
{
    size_t covered = 0;
    for (const struct sim_mapping *m = r ? r->maps : NULL; m; m = m->next) {
        if (m->va >= ptr && m->va + m->size <= ptr + size)
            covered += m->size;
        else if (ptr < m->va + m->size && m->va < ptr + size)
            return 0; /* would cut a mapping */
    }
    return covered == size;
}

static int in_range(const struct sim_mapping *m, uintptr_t ptr, size_t size)
{
    return m->va >= ptr && m->va + m->size <= ptr + size;
}

/* The host protection a mapping needs: the widest access granted. */
static int prot_of(const struct sim_mapping *m)
{
    int f = m->host_access;
    for (int d = 0; d < SIM_MAX_DEVICES; d++)
        f |= m->access[d];
    if (f & 2) /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 */
        return PROT_READ | PROT_WRITE;
    return f ? PROT_READ : PROT_NONE;
}

/* ---- address ranges --------------------------------------------------- */

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

/* Only a reservation without mappings can be freed: the simulator is
 * stricter than what is reported of the real driver here (which seems to
 * unmap implicitly), so that code tested on it unmaps first and works on
 * both. */
static CUresult address_free(CUdeviceptr ptr, size_t size)
{
    sim_lock();
    struct sim_resv **pp = &sim_g.resvs;
    while (*pp && !((*pp)->base == ptr && (*pp)->size == size))
        pp = &(*pp)->next;
    struct sim_resv *r = *pp;
    CUresult rc = !r || r->maps ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS) {
        *pp = r->next;
        munmap((void *)r->base, r->size);
        free(r);
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    SIM_GATED(address_free(ptr, size));
}

/* ---- physical memory -------------------------------------------------- */

/* A host NUMA node id this machine has (node 0 where sysfs shows none). */
static int numa_node_valid(int id)
{
    char path[64];
    if (id < 0)
        return 0;
    if (access("/sys/devices/system/node", F_OK) != 0)
        return id == 0;
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d", id);
    return access(path, F_OK) == 0;
}

/* Checks prop for cuMemCreate; sets *loc. */
static CUresult check_prop(const CUmemAllocationProp *prop, int *loc)
{
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->requestedHandleTypes & ~(unsigned long long)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED; /* Win32 handles, fabric (no IMEX channel here) */
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!sim_dev_valid(prop->location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        *loc = SIM_LOC_DEVICE;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        if (!numa_node_valid(prop->location.id))
            return CUDA_ERROR_INVALID_VALUE;
        *loc = SIM_LOC_HOST;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
        /* documented: HOST allocations are not IPC capable */
        if (prop->requestedHandleTypes)
            return CUDA_ERROR_INVALID_VALUE;
        *loc = SIM_LOC_HOST;
        return CUDA_SUCCESS;
    default: /* HOST_NUMA_CURRENT is documented as invalid for cuMemCreate */
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult mem_create(CUmemGenericAllocationHandle *handle, size_t size,
                           const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult injected = sim_inject_take("cuMemCreate");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (!handle || !prop || flags != 0 || size == 0 || size % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    int loc = 0;
    CUresult rc = check_prop(prop, &loc);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct sim_phys *ph = calloc(1, sizeof *ph);
    if (!ph)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ph->fd = -1;
    ph->size = size;
    ph->loc = loc;
    ph->loc_type = prop->location.type;
    ph->dev = loc == SIM_LOC_DEVICE                              ? prop->location.id
              : prop->location.type == CU_MEM_LOCATION_TYPE_HOST ? 0
                                                                 : prop->location.id;
    ph->handle_types = prop->requestedHandleTypes;
    ph->accounted = loc == SIM_LOC_DEVICE ? size : 0;  /* host memory is not the GPU's */
    ph->host_charged = loc == SIM_LOC_HOST ? size : 0; /* but the host's (sim_host.c) */
    ph->refs = 1;
    sim_lock();
    ph->id = sim_new_id();
    if (ph->accounted)
        rc = sim_capacity_reserve(ph->dev, size);
    else
        rc = sim_host_charge(size);
    if (rc == CUDA_SUCCESS) {
        ph->fd = sim_vmm_memfd(size, loc);
        if (ph->fd < 0 || sim_phys_add_locked(ph) != 0) {
            if (ph->fd >= 0)
                close(ph->fd);
            if (ph->accounted)
                sim_capacity_release(ph->dev, size);
            if (ph->host_charged)
                sim_host_uncharge(size);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc != CUDA_SUCCESS)
        free(ph);
    else
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                const CUmemAllocationProp *prop, unsigned long long flags)
{
    SIM_GATED(mem_create(handle, size, prop, flags));
}

/* Drops one reference; the memory goes when the last reference and the
 * last mapping are gone (documented). */
static CUresult mem_release(CUmemGenericAllocationHandle handle)
{
    sim_lock();
    struct sim_phys *ph = phys_get(handle);
    CUresult rc = CUDA_SUCCESS;
    if (!ph || ph->refs <= 0) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (--ph->refs == 0 && ph->maps == 0) {
        phys_free_locked(ph);
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    SIM_GATED(mem_release(handle));
}

/* The handle that maps addr, with one more reference (to be released); the
 * same handle value that was mapped (documented). */
static CUresult retain_handle(CUmemGenericAllocationHandle *handle, void *addr)
{
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_mapping *m;
    sim_vmm_resv_locked((uintptr_t)addr, &m);
    if (m) {
        m->phys->refs++;
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->phys;
    }
    sim_unlock();
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    SIM_GATED(retain_handle(handle, addr));
}

/* ---- mappings --------------------------------------------------------- */

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
    if (!ph || ph->refs <= 0) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else if (!r || offset > ph->size || size > ph->size - offset) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        for (struct sim_mapping *m = r->maps; m; m = m->next)
            if (ptr < m->va + m->size && m->va < ptr + size)
                rc = CUDA_ERROR_INVALID_VALUE; /* already mapped (documented) */
    }
    struct sim_mapping *m = NULL;
    if (rc == CUDA_SUCCESS) {
        /* no access until cuMemSetAccess (documented) */
        m = calloc(1, sizeof *m);
        if (!m || mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->fd,
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
        m->prot = PROT_NONE;
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

/* The range must be whole mappings (documented: no sub-range of a
 * mapping; and no gap, or the real driver fails too). */
static CUresult mem_unmap(CUdeviceptr ptr, size_t size)
{
    CUresult injected = sim_inject_take("cuMemUnmap");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_resv *r = resv_containing(ptr, size);
    CUresult rc = whole_mappings(r, ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && sim_g.pending_ops) {
        sim_wait_all_idle_locked(); /* queued copies may still use it */
        r = resv_containing(ptr, size);
        rc = whole_mappings(r, ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS) {
        for (struct sim_mapping *m = r->maps, *nx; m; m = nx) {
            nx = m->next;
            if (in_range(m, ptr, size))
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

static int is_host_location(CUmemLocationType t)
{
    return t == CU_MEM_LOCATION_TYPE_HOST_NUMA || t == CU_MEM_LOCATION_TYPE_HOST;
}

static void grant(struct sim_mapping *m, const CUmemAccessDesc *desc, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (is_host_location(desc[i].location.type))
            m->host_access = (uint8_t)desc[i].flags;
        else
            m->access[desc[i].location.id] = (uint8_t)desc[i].flags;
    }
}

/* Grants each location in desc its access to every mapping of the range.
 * The range must be whole mappings (the simulator keeps access per
 * mapping); host locations only for host memory (documented). */
static CUresult set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    CUresult injected = sim_inject_take("cuMemSetAccess");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (!desc || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
        if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
            if (!sim_dev_valid(desc[i].location.id))
                return CUDA_ERROR_INVALID_DEVICE;
        } else if (!is_host_location(desc[i].location.type)) {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    sim_lock();
    struct sim_resv *r;
    CUresult rc;
    for (;;) {
        r = resv_containing(ptr, size);
        rc = whole_mappings(r, ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
        int narrows = 0;
        for (struct sim_mapping *m = rc == CUDA_SUCCESS ? r->maps : NULL; m; m = m->next) {
            if (!in_range(m, ptr, size))
                continue;
            for (size_t i = 0; i < count; i++)
                if (is_host_location(desc[i].location.type) && m->phys->loc != SIM_LOC_HOST)
                    rc = CUDA_ERROR_INVALID_VALUE;
            struct sim_mapping t = *m;
            grant(&t, desc, count);
            narrows |= m->prot & ~prot_of(&t);
        }
        if (rc != CUDA_SUCCESS || !narrows || !sim_g.pending_ops)
            break;
        /* taking access away: not under a queued copy (then check again) */
        sim_wait_all_idle_locked();
    }
    for (struct sim_mapping *m = rc == CUDA_SUCCESS ? r->maps : NULL; m; m = m->next) {
        if (!in_range(m, ptr, size))
            continue;
        grant(m, desc, count);
        int prot = prot_of(m);
        if (prot != m->prot) {
            mprotect((void *)m->va, m->size, prot);
            m->prot = prot;
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

static CUresult get_access(unsigned long long *flags, const CUmemLocation *location,
                           CUdeviceptr ptr)
{
    if (!flags || !location)
        return CUDA_ERROR_INVALID_VALUE;
    if (location->type == CU_MEM_LOCATION_TYPE_DEVICE) {
        if (!sim_dev_valid(location->id))
            return CUDA_ERROR_INVALID_DEVICE;
    } else if (!is_host_location(location->type)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    sim_lock();
    struct sim_mapping *m;
    sim_vmm_resv_locked((uintptr_t)ptr, &m);
    if (m)
        *flags = location->type == CU_MEM_LOCATION_TYPE_DEVICE ? m->access[location->id]
                                                               : m->host_access;
    sim_unlock();
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                   CUdeviceptr ptr)
{
    SIM_GATED(get_access(flags, location, ptr));
}

CUresult sim_vmm_check_access_locked(uintptr_t p, size_t len, int dev, int write)
{
    if (len == 0 || !sim_g.resvs)
        return CUDA_SUCCESS;
    uint8_t need = write ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
    uintptr_t end = p + len < p ? UINTPTR_MAX : p + len;
    for (struct sim_resv *r = sim_g.resvs; r; r = r->next) {
        uintptr_t lo = p > r->base ? p : r->base;
        uintptr_t hi = end < r->base + r->size ? end : r->base + r->size;
        if (lo >= hi)
            continue;
        size_t mapped = 0, allowed = 0;
        for (struct sim_mapping *m = r->maps; m; m = m->next) {
            uintptr_t a = lo > m->va ? lo : m->va;
            uintptr_t b = hi < m->va + m->size ? hi : m->va + m->size;
            if (a < b) {
                mapped += b - a;
                if ((m->access[dev] & need) == need)
                    allowed += b - a;
            }
        }
        if (mapped < hi - lo)
            return CUDA_ERROR_INVALID_VALUE; /* not mapped: no such device memory */
        if (allowed < hi - lo)
            return CUDA_ERROR_ILLEGAL_ADDRESS; /* what a GPU's MMU fault gives */
    }
    return CUDA_SUCCESS;
}

/* ---- queries ---------------------------------------------------------- */

static CUresult granularity(size_t *gran, const CUmemAllocationProp *prop,
                            CUmemAllocationGranularity_flags option)
{
    if (!gran || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
        option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        if (!sim_dev_valid(prop->location.id))
            return CUDA_ERROR_INVALID_DEVICE;
    } else if (!is_host_location(prop->location.type)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *gran = SIM_GRANULARITY; /* 2 MiB, for host memory as for device memory */
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
        prop->location.type = ph->loc_type;
        prop->location.id = ph->dev;
        prop->requestedHandleTypes = (CUmemAllocationHandleType)ph->handle_types;
    }
    sim_unlock();
    return ph ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                           CUmemGenericAllocationHandle handle)
{
    SIM_GATED(props_from_handle(prop, handle));
}

/* ---- checkpoint: device memory only ----------------------------------- */

static int parked(const struct sim_phys *ph)
{
    return ph->loc == SIM_LOC_DEVICE;
}

CUresult sim_vmm_checkpoint_locked(uint64_t bytes[SIM_MAX_DEVICES])
{
    /* device memory shared with other processes cannot be parked under
     * them (cuda-checkpoint: "does not support UVM or IPC memory") */
    for (struct sim_phys *ph = sim_g.phys; ph; ph = ph->next)
        if (parked(ph) && ph->share_id)
            return CUDA_ERROR_NOT_SUPPORTED;
    for (struct sim_phys *ph = sim_g.phys; ph; ph = ph->next) {
        if (!parked(ph))
            continue;
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
        while (parked(ph) && done < ph->size) {
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
            if (parked(m->phys))
                reserve_none(m->va, m->size);
    for (struct sim_phys *ph = sim_g.phys; ph; ph = ph->next) {
        if (!parked(ph))
            continue;
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
        ph->fd = sim_vmm_memfd(ph->size, ph->loc);
        size_t done = 0;
        if (ph->fd >= 0) {
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
            if (!parked(m->phys))
                continue;
            if (m->phys->fd < 0 || mmap((void *)m->va, m->size, m->prot, MAP_SHARED | MAP_FIXED,
                                        m->phys->fd, (off_t)m->offset) == MAP_FAILED)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    return rc;
}
