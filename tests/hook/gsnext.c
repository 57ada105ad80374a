/*
 * gsnext.c - libgsnext.so, a library loaded after the hook and before
 * libcuda that, like a profiler or another interposer, defines
 * cuLaunchKernel itself and looks up "the next one" with
 * dlsym(RTLD_NEXT, ...).  RTLD_NEXT is relative to the caller, so it must
 * skip this library's own definition.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <gnu/libc-version.h>

#include "test_resolve.h"

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra)
{
    (void)f, (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX, (void)blockDimY;
    (void)blockDimZ, (void)sharedMemBytes, (void)hStream, (void)kernelParams, (void)extra;
    return CUDA_ERROR_NOT_SUPPORTED; /* never the one a lookup should find */
}

/* This library's own definition (taking &cuLaunchKernel here would give
 * the interposed one, the hook's). */
extern __typeof__(cuLaunchKernel) gsnext_own
    __attribute__((alias("cuLaunchKernel"), visibility("hidden")));

/* Also defined by libc: RTLD_NEXT from here must give libc's, for names
 * the hook does not interpose as for those it does. */
const char *gnu_get_libc_release(void)
{
    return "gsnext";
}

/* Not a tail call: dlsym must see this library as its caller. */
__attribute__((optimize("no-optimize-sibling-calls"))) void *gsnext_lookup_next(const char *name)
{
    void *volatile p = dlsym(RTLD_NEXT, name);
    return p;
}

void *gsnext_own_launch(void)
{
    return (void *)&gsnext_own;
}
