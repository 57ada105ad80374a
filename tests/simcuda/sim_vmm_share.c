/*
 * sim_vmm_share.c - cuMemExportToShareableHandle and
 * cuMemImportFromShareableHandle with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR:
 * the shareable handle is a real file descriptor (a dup of the physical
 * memory's memfd), so it can travel over a Unix socket (SCM_RIGHTS) like
 * the real driver's; an import makes a new handle whose mappings share
 * the bytes, and keeps them alive after the exporter has released its own.
 *
 * The memfd's trailing page (SIM_SHARE_HDR, past the memory; the file is
 * sealed at that size) tells an importer what the memory is: its size,
 * location, requested handle types, the simulated machine (segment name)
 * and, for device memory, its entry in the segment's share table.  Device
 * memory is counted against capacity once: at export the bytes move from
 * the exporter's count to that entry, every process holding a handle to
 * it is marked there, and the last holder to release it (or to die) gives
 * them back.  Host memory is not counted at all; the memfd's lifetime is
 * the memory's.
 */
#include "sim_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARE_MAGIC 0x6873756d69737067ULL /* "gpsimush" */

struct share_hdr {
    uint64_t magic;
    uint64_t size;
    uint64_t share_id;
    uint64_t handle_types;
    int32_t loc;
    int32_t loc_type;
    int32_t dev;
    int32_t pad;
    char segment[256];
};

_Static_assert(sizeof(struct share_hdr) <= SIM_SHARE_HDR, "header page");

static int write_hdr(const struct sim_phys *ph)
{
    struct share_hdr h;
    memset(&h, 0, sizeof h);
    h.magic = SHARE_MAGIC;
    h.size = ph->size;
    h.share_id = ph->share_id;
    h.handle_types = ph->handle_types;
    h.loc = ph->loc;
    h.loc_type = ph->loc_type;
    h.dev = ph->loc == SIM_LOC_DEVICE ? sim_dev_phys(ph->dev) : ph->dev; /* the machine's */
    snprintf(h.segment, sizeof h.segment, "%s", sim_g.cfg.name);
    ssize_t n;
    while ((n = pwrite(ph->fd, &h, sizeof h, (off_t)ph->size)) < 0 && errno == EINTR)
        ;
    return n == (ssize_t)sizeof h ? 0 : -1;
}

/* The header of a descriptor, if it is physical memory of this simulated
 * machine. */
static int read_hdr(int fd, struct share_hdr *h)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < SIM_SHARE_HDR)
        return -1;
    size_t size = (size_t)st.st_size - SIM_SHARE_HDR;
    ssize_t n;
    while ((n = pread(fd, h, sizeof *h, (off_t)size)) < 0 && errno == EINTR)
        ;
    if (n != (ssize_t)sizeof *h || h->magic != SHARE_MAGIC || h->size != size ||
        size % SIM_GRANULARITY || size == 0)
        return -1;
    h->segment[sizeof h->segment - 1] = 0;
    if (strcmp(h->segment, sim_g.cfg.name) != 0)
        return -1; /* another simulated machine's memory */
    if (h->loc == SIM_LOC_DEVICE ? sim_dev_of_phys(h->dev) < 0 : h->loc != SIM_LOC_HOST)
        return -1;
    return 0;
}

static CUresult export_handle(void *shareable, CUmemGenericAllocationHandle handle,
                              CUmemAllocationHandleType type, unsigned long long flags)
{
    CUresult injected = sim_inject_take("cuMemExportToShareableHandle");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (!shareable || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_phys *ph = sim_phys_get_locked(handle);
    CUresult rc = CUDA_SUCCESS;
    if (!ph || ph->refs <= 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
             !(ph->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        rc = CUDA_ERROR_INVALID_VALUE; /* not requested at cuMemCreate: not exportable */
    uint64_t id = 0;
    if (rc == CUDA_SUCCESS && ph->loc == SIM_LOC_DEVICE && !ph->share_id) {
        sim_shm_lock();
        rc = sim_share_export_locked(ph->dev, ph->accounted, &id);
        sim_shm_unlock();
        if (rc == CUDA_SUCCESS) {
            ph->share_id = id;
            ph->accounted = 0; /* the share entry counts it now */
        }
    }
    int fd = -1;
    if (rc == CUDA_SUCCESS && (write_hdr(ph) != 0 || (fd = fcntl(ph->fd, F_DUPFD_CLOEXEC, 0)) < 0))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS)
        *(int *)shareable = fd;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle,
                                                 CUmemGenericAllocationHandle handle,
                                                 CUmemAllocationHandleType handleType,
                                                 unsigned long long flags)
{
    SIM_GATED(export_handle(shareableHandle, handle, handleType, flags));
}

/* The descriptor stays the caller's (as with the real driver, which the
 * CUDA samples close after importing): the handle holds a dup of it. */
static CUresult import_handle(CUmemGenericAllocationHandle *handle, void *os_handle,
                              CUmemAllocationHandleType type)
{
    CUresult injected = sim_inject_take("cuMemImportFromShareableHandle");
    if (injected != CUDA_SUCCESS)
        return injected;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return type == CU_MEM_HANDLE_TYPE_WIN32 || type == CU_MEM_HANDLE_TYPE_WIN32_KMT ||
                       type == CU_MEM_HANDLE_TYPE_FABRIC
                   ? CUDA_ERROR_NOT_SUPPORTED
                   : CUDA_ERROR_INVALID_VALUE;
    int fd = (int)(intptr_t)os_handle;
    struct share_hdr h;
    if (fd < 0 || read_hdr(fd, &h) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_phys *ph = calloc(1, sizeof *ph);
    if (!ph)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ph->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    ph->size = h.size;
    ph->loc = h.loc;
    ph->loc_type = (CUmemLocationType)h.loc_type;
    ph->dev = h.loc == SIM_LOC_DEVICE ? sim_dev_of_phys(h.dev) : h.dev;
    ph->handle_types = h.handle_types;
    ph->id = sim_new_id();
    ph->share_id = h.share_id;
    ph->refs = 1;
    CUresult rc = ph->fd < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    sim_lock();
    if (rc == CUDA_SUCCESS && ph->share_id) {
        sim_shm_lock();
        rc = sim_share_join_locked(ph->share_id, ph->dev, ph->size);
        sim_shm_unlock();
    }
    if (rc == CUDA_SUCCESS && sim_phys_add_locked(ph) != 0) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        int others = 0;
        for (struct sim_phys *q = sim_g.phys; q; q = q->next)
            others += ph->share_id && q->share_id == ph->share_id;
        if (ph->share_id && !others) {
            sim_shm_lock();
            sim_share_leave_locked(ph->share_id);
            sim_shm_unlock();
        }
    }
    sim_unlock();
    if (rc != CUDA_SUCCESS) {
        if (ph->fd >= 0)
            close(ph->fd);
        free(ph);
        return rc;
    }
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                   void *osHandle,
                                                   CUmemAllocationHandleType shHandleType)
{
    SIM_GATED(import_handle(handle, osHandle, shHandleType));
}
