/*
 * swap_driver.c - filling the swap tier's driver table (swap_driver.h).
 */
#include "swap_driver.h"

#include <stdio.h>

#define RESOLVE(field, name)                                                                       \
    do {                                                                                           \
        void *p_ = lookup(lib, name);                                                              \
        if (!p_) {                                                                                 \
            snprintf(why, whylen, "the driver has no %s", name);                                   \
            return -1;                                                                             \
        }                                                                                          \
        *(void **)&d->field = p_;                                                                  \
    } while (0)

int gs_swap_driver_resolve(gs_swap_driver_t *d, void *lib, void *(*lookup)(void *, const char *),
                           char *why, size_t whylen)
{
    RESOLVE(reserve, "cuMemAddressReserve");
    RESOLVE(address_free, "cuMemAddressFree");
    RESOLVE(create, "cuMemCreate");
    RESOLVE(release, "cuMemRelease");
    RESOLVE(map, "cuMemMap");
    RESOLVE(unmap, "cuMemUnmap");
    RESOLVE(set_access, "cuMemSetAccess");
    RESOLVE(granularity, "cuMemGetAllocationGranularity");
    /* Optional: without it allocations are still backed and movable, but
     * no host window can be opened (swap_window.c says so). */
    *(void **)&d->import = lookup(lib, "cuMemImportFromShareableHandle");
    RESOLVE(memcpy_async, "cuMemcpyAsync");
    RESOLVE(stream_create, "cuStreamCreate");
    RESOLVE(stream_destroy, "cuStreamDestroy_v2");
    RESOLVE(stream_synchronize, "cuStreamSynchronize");
    RESOLVE(event_create, "cuEventCreate");
    RESOLVE(event_destroy, "cuEventDestroy_v2");
    RESOLVE(event_record, "cuEventRecord");
    RESOLVE(event_synchronize, "cuEventSynchronize");
    RESOLVE(ctx_push, "cuCtxPushCurrent_v2");
    RESOLVE(ctx_pop, "cuCtxPopCurrent_v2");
    RESOLVE(ctx_synchronize, "cuCtxSynchronize");
    RESOLVE(error_name, "cuGetErrorName");
    RESOLVE(device_attribute, "cuDeviceGetAttribute");
    RESOLVE(export_fd, "cuMemExportToShareableHandle");
    RESOLVE(props, "cuMemGetAllocationPropertiesFromHandle");
    RESOLVE(retain, "cuMemRetainAllocationHandle");
    return 0;
}
