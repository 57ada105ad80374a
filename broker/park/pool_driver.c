/*
 * pool_driver.c - the host pool's driver calls through dlsym (pool_driver.h).
 */
#define _GNU_SOURCE
#include "pool_driver.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*device_get_fn)(CUdevice *, int);
typedef CUresult (*attribute_fn)(int *, CUdevice_attribute, CUdevice);
typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*export_fn)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                              unsigned long long);
typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*addr_free_fn)(CUdeviceptr, size_t);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*access_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*errname_fn)(CUresult, const char **);

struct gs_pool_driver {
    void *lib;
    int gpu, numa;
    create_fn create;
    release_fn release;
    export_fn export_;
    reserve_fn reserve;
    addr_free_fn addr_free;
    map_fn map;
    unmap_fn unmap;
    access_fn access;
    errname_fn errname;
};

static int failed(gs_pool_driver_t *d, const char *fn, CUresult r, char *err, size_t errlen)
{
    const char *name = NULL;
    if (d->errname)
        d->errname(r, &name);
    snprintf(err, errlen, "%s: %s", fn, name ? name : "unknown error");
    return -1;
}

#define RESOLVE(field, type, name)                                                                 \
    do {                                                                                           \
        d->field = (type)dlsym(lib, name);                                                         \
        if (!d->field) {                                                                           \
            snprintf(why, whylen, "the driver has no %s (host pool unavailable)", name);           \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

gs_pool_driver_t *gs_pool_driver_load(int gpu, char *why, size_t whylen)
{
    const char *path = getenv("GPUSHARE_LIBCUDA");
    void *lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) {
        snprintf(why, whylen, "no NVIDIA driver loaded");
        return NULL;
    }
    gs_pool_driver_t *d = calloc(1, sizeof *d);
    if (!d) {
        dlclose(lib);
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    d->lib = lib;
    d->gpu = gpu;
    init_fn init;
    device_get_fn device_get;
    attribute_fn attribute;
    init = (init_fn)dlsym(lib, "cuInit");
    device_get = (device_get_fn)dlsym(lib, "cuDeviceGet");
    attribute = (attribute_fn)dlsym(lib, "cuDeviceGetAttribute");
    RESOLVE(create, create_fn, "cuMemCreate");
    RESOLVE(release, release_fn, "cuMemRelease");
    RESOLVE(export_, export_fn, "cuMemExportToShareableHandle");
    RESOLVE(reserve, reserve_fn, "cuMemAddressReserve");
    RESOLVE(addr_free, addr_free_fn, "cuMemAddressFree");
    RESOLVE(map, map_fn, "cuMemMap");
    RESOLVE(unmap, unmap_fn, "cuMemUnmap");
    RESOLVE(access, access_fn, "cuMemSetAccess");
    d->errname = (errname_fn)dlsym(lib, "cuGetErrorName");
    CUdevice dev;
    if (!init || !device_get || init(0) != CUDA_SUCCESS || device_get(&dev, gpu) != CUDA_SUCCESS) {
        snprintf(why, whylen, "GPU %d is not available to the driver", gpu);
        goto fail;
    }
    /* The GPU's own NUMA node keeps the copies off the inter-socket link;
     * a machine without NUMA answers -1 and has node 0. */
    int numa = -1;
    if (!attribute || attribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev) != CUDA_SUCCESS ||
        numa < 0)
        numa = 0;
    d->numa = numa;
    return d;
fail:
    dlclose(lib);
    free(d);
    return NULL;
}

void gs_pool_driver_free(gs_pool_driver_t **self_p)
{
    gs_pool_driver_t *d = self_p ? *self_p : NULL;
    if (!d)
        return;
    dlclose(d->lib); /* drops only the reference RTLD_NOLOAD took */
    free(d);
    *self_p = NULL;
}

int gs_pool_driver_numa(const gs_pool_driver_t *self)
{
    return self->numa;
}

int gs_pool_driver_pin(gs_pool_driver_t *d, size_t bytes, uint64_t *handle, char *err,
                       size_t errlen)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop.location.id = d->numa;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle h = 0;
    CUresult r = d->create(&h, bytes, &prop, 0);
    if (r != CUDA_SUCCESS)
        return failed(d, "cuMemCreate", r, err, errlen);
    *handle = (uint64_t)h;
    return 0;
}

int gs_pool_driver_unpin(gs_pool_driver_t *d, uint64_t handle, char *err, size_t errlen)
{
    CUresult r = d->release((CUmemGenericAllocationHandle)handle);
    return r == CUDA_SUCCESS ? 0 : failed(d, "cuMemRelease", r, err, errlen);
}

int gs_pool_driver_map(gs_pool_driver_t *d, uint64_t handle, size_t bytes, void **cpu, char *err,
                       size_t errlen)
{
    CUdeviceptr va = 0;
    CUresult r = d->reserve(&va, bytes, 0, 0, 0);
    if (r != CUDA_SUCCESS)
        return failed(d, "cuMemAddressReserve", r, err, errlen);
    const char *step = "cuMemMap";
    r = d->map(va, bytes, 0, (CUmemGenericAllocationHandle)handle, 0);
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc access;
        memset(&access, 0, sizeof access);
        access.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        access.location.id = d->numa;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        step = "cuMemSetAccess";
        r = d->access(va, bytes, &access, 1);
        if (r == CUDA_SUCCESS) {
            *cpu = (void *)(uintptr_t)va;
            return 0;
        }
        d->unmap(va, bytes);
    }
    d->addr_free(va, bytes);
    return failed(d, step, r, err, errlen);
}

void gs_pool_driver_unmap(gs_pool_driver_t *d, void *cpu, size_t bytes)
{
    d->unmap((CUdeviceptr)(uintptr_t)cpu, bytes);
    d->addr_free((CUdeviceptr)(uintptr_t)cpu, bytes);
}

int gs_pool_driver_zero(gs_pool_driver_t *d, uint64_t handle, size_t bytes, char *err,
                        size_t errlen)
{
    void *cpu = NULL;
    if (gs_pool_driver_map(d, handle, bytes, &cpu, err, errlen) != 0)
        return -1;
    memset(cpu, 0, bytes);
    gs_pool_driver_unmap(d, cpu, bytes);
    return 0;
}

int gs_pool_driver_export(gs_pool_driver_t *d, uint64_t handle, int *fd, char *err, size_t errlen)
{
    int out = -1;
    CUresult r = d->export_(&out, (CUmemGenericAllocationHandle)handle,
                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS)
        return failed(d, "cuMemExportToShareableHandle", r, err, errlen);
    *fd = out;
    return 0;
}
