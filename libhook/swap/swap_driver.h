/*
 * swap_driver.h - the driver calls the swap tier makes, as a table of the
 * real driver's functions.  The hook fills it from libcuda (never from its
 * own wrappers, so the swap's copies pass no gate and are not accounted);
 * the tests fill it from the simulated driver.  Keeping the table narrow
 * keeps libhook/swap/ free of the hook's internals.
 */
#ifndef GS_SWAP_DRIVER_H
#define GS_SWAP_DRIVER_H

#include <cuda.h>

typedef struct {
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
                            CUmemAllocationGranularity_flags);
    CUresult (*import)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
    CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*stream_create)(CUstream *, unsigned int);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*stream_synchronize)(CUstream);
    CUresult (*event_create)(CUevent *, unsigned int);
    CUresult (*event_destroy)(CUevent);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_synchronize)(CUevent);
    CUresult (*ctx_push)(CUcontext);
    CUresult (*ctx_pop)(CUcontext *);
    CUresult (*ctx_synchronize)(void);
    CUresult (*error_name)(CUresult, const char **);
    CUresult (*device_attribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*export_fd)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                          unsigned long long);
    CUresult (*props)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
    CUresult (*retain)(CUmemGenericAllocationHandle *, void *);
} gs_swap_driver_t;

/* Fills the table from a loaded driver library (dlopen handle) with the
 * given lookup (the real dlsym); 0, or -1 naming the first missing call in
 * why.  `import` alone may stay NULL (a driver that cannot import). */
int gs_swap_driver_resolve(gs_swap_driver_t *d, void *lib, void *(*lookup)(void *, const char *),
                           char *why, size_t whylen);

#endif
