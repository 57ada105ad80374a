/*
 * test_resolve.h - helpers of test_resolve.c that live in other files: the
 * per-thread-default-stream ABI names (a translation unit compiled with
 * CUDA_API_PER_THREAD_DEFAULT_STREAM), the legacy 4-argument
 * cuGetProcAddress (cuda.h renames the name to _v2), and libgsnext, a
 * library that calls dlsym(RTLD_NEXT, ...) itself.
 */
#ifndef GS_TEST_RESOLVE_H
#define GS_TEST_RESOLVE_H

#include <cuda.h>

void *ptds_launch_kernel_addr(void);
void *ptds_memcpy_htod_addr(void);
CUresult cuGetProcAddress_legacy(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

void *gsnext_lookup_next(const char *name);
void *gsnext_own_launch(void);

#endif
