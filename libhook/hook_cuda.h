/*
 * hook_cuda.h - the driver's API as every file of the hook sees it, and the
 * few definitions that go with it everywhere.
 *
 * cuda.h normally renames cuMemAlloc to cuMemAlloc_v2 and so on; with
 * __CUDA_API_VERSION_INTERNAL the renaming is undone and every ABI version
 * (cuMemAlloc, cuMemAlloc_v2, cuMemcpyHtoD_v2_ptds, ...) is declared with
 * its own prototype, so the compiler checks each wrapper against the exact
 * function it replaces.  The library is built with -fvisibility=hidden:
 * only HOOK_EXPORT definitions (the CUDA ABI names, dlsym, gpushare_hook_*)
 * are visible.
 */
#ifndef GS_HOOK_CUDA_H
#define GS_HOOK_CUDA_H

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
/* The one ABI version cuda.h leaves undeclared under
 * __CUDA_API_VERSION_INTERNAL (only as the target of a #define). */
CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                       unsigned int Flags);

#define HOOK_EXPORT __attribute__((visibility("default")))
/* For code that runs inside dlsym calls made before a sanitizer runtime is
 * initialised (ASan resolves its interceptors through dlsym(RTLD_NEXT)):
 * instrumented code would touch shadow memory that does not exist yet. */
#define HOOK_NO_SANITIZE __attribute__((no_sanitize("address", "undefined", "thread")))

/* Device ordinals the hook keeps state for (a bit mask of them fits in 64
 * bits). */
#define HOOK_MAX_DEVICES 64

/* What the submission path lays its data out by (x86-64 and aarch64). */
#define HOOK_CACHE_LINE 64

/* An atomic alone on its cache line: a struct's size is a multiple of its
 * alignment, so no other variable can share the line, and no write to
 * another variable takes the line away from the cores that read this one. */
struct hook_line_int {
    _Alignas(HOOK_CACHE_LINE) _Atomic int v;
};
struct hook_line_u64 {
    _Alignas(HOOK_CACHE_LINE) _Atomic unsigned long long v;
};

/* The stream a call names: NULL is the legacy default stream, or the
 * per-thread one for the _ptsz/_ptds variants (pt). */
static inline CUstream hook_cuda_norm_stream(CUstream s, int pt)
{
    if (s == NULL)
        return pt ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    return s;
}

/* One of the default streams, which belong to the current context. */
static inline int hook_cuda_stream_implicit(CUstream s)
{
    return s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

#endif
