/*
 * test_resolve_ptds.c - built with CUDA_API_PER_THREAD_DEFAULT_STREAM, so
 * cuda.h binds cuLaunchKernel to cuLaunchKernel_ptsz and cuMemcpyHtoD to
 * cuMemcpyHtoD_v2_ptds, as in a program compiled with nvcc
 * --default-stream per-thread.  Also reaches the legacy 4-argument
 * cuGetProcAddress, whose name cuda.h maps to cuGetProcAddress_v2.
 */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include "test_resolve.h"

void *ptds_launch_kernel_addr(void)
{
    return (void *)&cuLaunchKernel;
}

void *ptds_memcpy_htod_addr(void)
{
    return (void *)&cuMemcpyHtoD;
}

#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

CUresult cuGetProcAddress_legacy(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return cuGetProcAddress(symbol, pfn, cudaVersion, flags);
}
