/*
 * hook_mem_wrap.c - the wrappers of every allocation and free path, and of
 * what the memory limit changes: managed memory instead of device memory,
 * and asking the broker for room when an allocation does not fit.  What
 * they count is kept by hook_mem.c.
 *
 * Accounted: cuMemAlloc*, cuMemAllocPitch*, cuMemAllocAsync*,
 * cuMemAllocFromPoolAsync* (the size asked for; what the pool keeps cached
 * is not seen), cuMemAllocManaged, cuMemFree*, cuMemFreeAsync*, and the
 * virtual memory API (cuMemCreate here; cuMemMap, cuMemUnmap and
 * cuMemRelease in hook_vmm_wrap.c).
 *
 * GPUSHARE_MEMORY_LIMIT: an allocation past it fails with
 * CUDA_ERROR_OUT_OF_MEMORY without reaching the driver, and cuMemGetInfo /
 * cuDeviceTotalMem report the limit.  GPUSHARE_MEMORY=managed serves
 * cuMemAlloc_v2 and cuMemAllocPitch_v2 with
 * cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL) (see README.md for what it does
 * not cover).  In device mode, an allocation the driver refuses for lack of
 * memory asks the broker to make room (make_room) and is retried once when
 * it did, unless the thread is capturing a stream.
 */
#include <limits.h>
#include <stdint.h>

#include "hook_capture.h"
#include "hook_client.h"
#include "hook_clock.h"
#include "hook_config.h"
#include "hook_cuctx.h"
#include "hook_ipc.h"
#include "hook_mem.h"
#include "hook_real.h"
#include "hook_swap.h"
#include "hook_thread.h"
#include "hook_wrap.h"
#include "log.h"

/* ---- where an allocation goes, and room for it ----------------------------- */

static void current(struct hook_mem_where *w)
{
    CUdevice d;
    w->ctx = NULL;
    w->dev = -1;
    if (hook_cu.ctxGetCurrent && hook_cu.ctxGetCurrent(&w->ctx) == CUDA_SUCCESS && w->ctx &&
        hook_cu.ctxGetDevice && hook_cu.ctxGetDevice(&d) == CUDA_SUCCESS && (int)d >= 0 &&
        (int)d < HOOK_MAX_DEVICES)
        w->dev = (int)d;
}

static void on_stream(CUstream s, int pt, struct hook_mem_where *w)
{
    if (hook_cuctx_stream_where(hook_cuda_norm_stream(s, pt), &w->ctx, &w->dev) != 0 ||
        w->dev < 0 || w->dev >= HOOK_MAX_DEVICES) {
        w->ctx = NULL;
        w->dev = -1;
    }
}

/* Out of memory in device mode: may the broker make room?  1: retry. */
static int room(struct hook_thr *t, const struct hook_mem_where *w, uint64_t bytes, CUresult r,
                int capturing)
{
    if (r != CUDA_ERROR_OUT_OF_MEMORY || hook_cfg.managed || w->dev < 0 || capturing ||
        atomic_load_explicit(&t->captures, memory_order_relaxed) > 0)
        return 0;
    char reason[256] = "";
    uint64_t t0 = hook_clock_ns();
    int ok = hook_client_make_room(w->dev, bytes, hook_cfg.make_room_ms, reason, sizeof reason);
    if (ok)
        gs_debug("the broker made room for %llu bytes on GPU %d in %llu ms; retrying",
                 (unsigned long long)bytes, w->dev,
                 (unsigned long long)(hook_clock_ns() - t0) / 1000000ULL);
    else if (reason[0])
        gs_warn("out of GPU memory (%llu bytes on GPU %d): %s", (unsigned long long)bytes, w->dev,
                reason);
    return ok;
}

static int stream_capturing(CUstream s, int pt)
{
    if (atomic_load_explicit(&hook_capture_count, memory_order_acquire) == 0)
        return 0;
    s = hook_cuda_norm_stream(s, pt);
    return s != CU_STREAM_LEGACY && hook_cuctx_stream_capturing(s);
}

/* Entry of every memory wrapper: nested calls and GPUSHARE_DISABLE go
 * straight to the driver. */
#define MEM_ENTER(abi, args) HOOK_WRAP_ENTER_UNLESS(abi, args, hook_cfg.disabled)
#define MEM_LEAVE(r)         HOOK_WRAP_LEAVE(r)

/* Calls `call` (assigning r), once more if the broker made room. */
#define WITH_ROOM(w, bytes, capturing, call)                                                       \
    do {                                                                                           \
        call;                                                                                      \
        if (room(t_, (w), (bytes), r, (capturing)))                                                \
            call;                                                                                  \
    } while (0)

static CUresult managed_alloc(CUdeviceptr *dptr, size_t bytes)
{
    __typeof__(&cuMemAllocManaged) f = HOOK_REAL_FN(cuMemAllocManaged);
    return f ? f(dptr, bytes, CU_MEM_ATTACH_GLOBAL) : CUDA_ERROR_NOT_SUPPORTED;
}

/* Device memory that the swap tier can move when it takes it (hook_swap.h),
 * else the driver's own. */
static CUresult device_alloc(__typeof__(&cuMemAlloc_v2) real, const struct hook_mem_where *w,
                             CUdeviceptr *dptr, size_t bytes)
{
    CUresult r;
    if (w->dev >= 0 && w->ctx && hook_swap_alloc(w->ctx, w->dev, bytes, dptr, &r))
        return r;
    return real(dptr, bytes);
}

HOOK_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    MEM_ENTER(cuMemAlloc_v2, (dptr, bytesize));
    struct hook_mem_where w;
    current(&w);
    CUresult r = hook_mem_admit(&w, bytesize);
    if (r == CUDA_SUCCESS) {
        if (hook_cfg.managed)
            r = managed_alloc(dptr, bytesize);
        else
            WITH_ROOM(&w, bytesize, 0, r = device_alloc(real_, &w, dptr, bytesize));
        hook_mem_settle(&w, bytesize, r, r == CUDA_SUCCESS && dptr ? *dptr : 0, bytesize,
                        hook_cfg.managed ? HOOK_MEM_MANAGED : HOOK_MEM_DEVICE);
    }
    MEM_LEAVE(r);
}

/* The 32-bit ABI: never converted (managed memory may lie above 4 GiB). */
HOOK_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    MEM_ENTER(cuMemAlloc, (dptr, bytesize));
    struct hook_mem_where w;
    current(&w);
    CUresult r = hook_mem_admit(&w, bytesize);
    if (r == CUDA_SUCCESS) {
        WITH_ROOM(&w, bytesize, 0, r = real_(dptr, bytesize));
        hook_mem_settle(&w, bytesize, r, r == CUDA_SUCCESS && dptr ? *dptr : 0, bytesize,
                        HOOK_MEM_DEVICE);
    }
    MEM_LEAVE(r);
}

#define PITCH_ALIGN 512 /* what cuMemAllocPitch gives on current GPUs */

static uint64_t pitch_estimate(size_t width, size_t height)
{
    uint64_t p = ((uint64_t)width + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
    return height && p > UINT64_MAX / height ? UINT64_MAX : p * height;
}

static CUresult managed_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                              unsigned elsize)
{
    if (!dptr || !pitch || width == 0 || height == 0 ||
        (elsize != 4 && elsize != 8 && elsize != 16))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = pitch_estimate(width, height);
    if (bytes > SIZE_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = managed_alloc(dptr, (size_t)bytes);
    if (r == CUDA_SUCCESS)
        *pitch = (size_t)(bytes / height);
    return r;
}

HOOK_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                        size_t Height, unsigned int ElementSizeBytes)
{
    MEM_ENTER(cuMemAllocPitch_v2, (dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
    struct hook_mem_where w;
    current(&w);
    uint64_t est = pitch_estimate(WidthInBytes, Height);
    CUresult r = hook_mem_admit(&w, est);
    if (r == CUDA_SUCCESS) {
        if (hook_cfg.managed)
            r = managed_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
        else
            WITH_ROOM(&w, est, 0, r = real_(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
        uint64_t size = r == CUDA_SUCCESS && pPitch ? (uint64_t)*pPitch * Height : est;
        hook_mem_settle(&w, est, r, r == CUDA_SUCCESS && dptr ? *dptr : 0, size,
                        hook_cfg.managed ? HOOK_MEM_MANAGED : HOOK_MEM_DEVICE);
    }
    MEM_LEAVE(r);
}

HOOK_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                     unsigned int WidthInBytes, unsigned int Height,
                                     unsigned int ElementSizeBytes)
{
    MEM_ENTER(cuMemAllocPitch, (dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
    struct hook_mem_where w;
    current(&w);
    uint64_t est = pitch_estimate(WidthInBytes, Height);
    CUresult r = hook_mem_admit(&w, est);
    if (r == CUDA_SUCCESS) {
        WITH_ROOM(&w, est, 0, r = real_(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
        uint64_t size = r == CUDA_SUCCESS && pPitch ? (uint64_t)*pPitch * Height : est;
        hook_mem_settle(&w, est, r, r == CUDA_SUCCESS && dptr ? *dptr : 0, size, HOOK_MEM_DEVICE);
    }
    MEM_LEAVE(r);
}

HOOK_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    MEM_ENTER(cuMemAllocManaged, (dptr, bytesize, flags));
    struct hook_mem_where w;
    current(&w);
    CUresult r = hook_mem_admit(&w, bytesize);
    if (r == CUDA_SUCCESS) {
        WITH_ROOM(&w, bytesize, 0, r = real_(dptr, bytesize, flags));
        hook_mem_settle(&w, bytesize, r, r == CUDA_SUCCESS && dptr ? *dptr : 0, bytesize,
                        HOOK_MEM_MANAGED);
    }
    MEM_LEAVE(r);
}

/* Stream-ordered allocations are counted when they are asked for, and
 * uncounted at cuMemFreeAsync (not when the stream reaches it). */
#define ALLOC_ASYNC(abi, pt, call_args)                                                            \
    MEM_ENTER(abi, call_args);                                                                     \
    struct hook_mem_where w;                                                                       \
    on_stream(hStream, pt, &w);                                                                    \
    int capturing = stream_capturing(hStream, pt);                                                 \
    CUresult r = hook_mem_admit(&w, bytesize);                                                     \
    if (r == CUDA_SUCCESS) {                                                                       \
        WITH_ROOM(&w, bytesize, capturing, r = real_ call_args);                                   \
        hook_mem_settle(&w, bytesize, r, r == CUDA_SUCCESS && dptr ? *dptr : 0, bytesize,          \
                        HOOK_MEM_DEVICE);                                                          \
    }                                                                                              \
    MEM_LEAVE(r)

HOOK_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ALLOC_ASYNC(cuMemAllocAsync, 0, (dptr, bytesize, hStream));
}

HOOK_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ALLOC_ASYNC(cuMemAllocAsync_ptsz, 1, (dptr, bytesize, hStream));
}

HOOK_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream)
{
    ALLOC_ASYNC(cuMemAllocFromPoolAsync, 0, (dptr, bytesize, pool, hStream));
}

HOOK_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                  CUmemoryPool pool, CUstream hStream)
{
    ALLOC_ASYNC(cuMemAllocFromPoolAsync_ptsz, 1, (dptr, bytesize, pool, hStream));
}

/* Physical memory of the virtual memory API: counted from here. */
HOOK_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    MEM_ENTER(cuMemCreate, (handle, size, prop, flags));
    struct hook_mem_where w = {NULL, -1};
    if (prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id >= 0 &&
        prop->location.id < HOOK_MAX_DEVICES)
        w.dev = prop->location.id; /* host-located allocations are not GPU memory */
    CUresult r = hook_mem_admit(&w, size);
    if (r == CUDA_SUCCESS) {
        WITH_ROOM(&w, size, 0, r = real_(handle, size, prop, flags));
        if (r == CUDA_SUCCESS && handle && w.dev >= 0)
            hook_swap_vmm_created(handle, size, w.dev); /* may rename it (hook_swap.h) */
        hook_mem_settle(&w, size, r, r == CUDA_SUCCESS && handle ? *handle : 0, size,
                        HOOK_MEM_PHYS);
    }
    MEM_LEAVE(r);
}

/* ---- free ------------------------------------------------------------------ */

/* The swap tier frees what it allocated (waiting for the context's work
 * first, as cuMemFree does); the rest goes to the driver. */
#define FREE_PTR(abi, p, args)                                                                     \
    MEM_ENTER(abi, args);                                                                          \
    struct hook_mem_entry v;                                                                       \
    int had = hook_mem_free_begin((CUdeviceptr)(p), &v);                                           \
    CUresult r;                                                                                    \
    if (!hook_swap_free((CUdeviceptr)(p), &r))                                                     \
        r = real_ args;                                                                            \
    hook_mem_free_end((CUdeviceptr)(p), &v, had, r);                                               \
    MEM_LEAVE(r)

HOOK_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    FREE_PTR(cuMemFree_v2, dptr, (dptr));
}

HOOK_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    FREE_PTR(cuMemFree, dptr, (dptr));
}

HOOK_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    FREE_PTR(cuMemFreeAsync, dptr, (dptr, hStream));
}

HOOK_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    FREE_PTR(cuMemFreeAsync_ptsz, dptr, (dptr, hStream));
}

/* ---- what the program is told ------------------------------------------- */

/* Memory the swap tier backs is a VMM mapping of whole granules to the
 * driver; the program asked for an allocation of its own size, and is told
 * about that one, as for cuMemAlloc. */
HOOK_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    MEM_ENTER(cuMemGetAddressRange_v2, (pbase, psize, dptr));
    CUdeviceptr base;
    size_t size;
    CUresult r;
    if (hook_swap_range(dptr, &base, &size)) {
        if (pbase)
            *pbase = base;
        if (psize)
            *psize = size;
        r = CUDA_SUCCESS;
    } else
        r = real_(pbase, psize, dptr);
    MEM_LEAVE(r);
}

/* One attribute of a pointer into the swap tier's memory, where it differs
 * from what the driver says of a VMM mapping; 1 when answered. */
static int swap_attribute(void *data, CUpointer_attribute a, CUdeviceptr ptr)
{
    CUdeviceptr base;
    size_t size;
    if (!data || !hook_swap_range(ptr, &base, &size))
        return 0;
    switch (a) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = base;
        return 1;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = size;
        return 1;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(int *)data = 1; /* emulated (hook_ipc.h), as for cuMemAlloc memory */
        return 1;
    default:
        return 0;
    }
}

HOOK_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                           CUdeviceptr ptr)
{
    MEM_ENTER(cuPointerGetAttribute, (data, attribute, ptr));
    CUresult r = real_(data, attribute, ptr);
    if (r == CUDA_SUCCESS)
        swap_attribute(data, attribute, ptr);
    MEM_LEAVE(r);
}

HOOK_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                            CUpointer_attribute *attributes, void **data,
                                            CUdeviceptr ptr)
{
    MEM_ENTER(cuPointerGetAttributes, (numAttributes, attributes, data, ptr));
    CUresult r = real_(numAttributes, attributes, data, ptr);
    for (unsigned i = 0; r == CUDA_SUCCESS && attributes && data && i < numAttributes; i++)
        swap_attribute(data[i], attributes[i], ptr);
    MEM_LEAVE(r);
}

/* Legacy IPC: emulated for the swap tier's memory (hook_ipc.h), the
 * driver's own for the rest. */
HOOK_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    MEM_ENTER(cuIpcGetMemHandle, (pHandle, dptr));
    CUresult r;
    if (!hook_ipc_get(pHandle, dptr, &r))
        r = real_(pHandle, dptr);
    MEM_LEAVE(r);
}

#define IPC_OPEN(abi)                                                                              \
    HOOK_EXPORT CUresult abi(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)        \
    {                                                                                              \
        MEM_ENTER(abi, (pdptr, handle, Flags));                                                    \
        CUresult r;                                                                                \
        if (!hook_ipc_open(pdptr, &handle, &r))                                                    \
            r = real_(pdptr, handle, Flags);                                                       \
        MEM_LEAVE(r);                                                                              \
    }
IPC_OPEN(cuIpcOpenMemHandle)
IPC_OPEN(cuIpcOpenMemHandle_v2)

HOOK_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    MEM_ENTER(cuIpcCloseMemHandle, (dptr));
    CUresult r;
    if (!hook_ipc_close(dptr, &r))
        r = real_(dptr);
    MEM_LEAVE(r);
}

/* Peer access covers cuMemAlloc memory but not VMM mappings: the swap
 * tier grants the peer GPU access to its ranges itself. */
HOOK_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    MEM_ENTER(cuCtxEnablePeerAccess, (peerContext, Flags));
    CUresult r = real_(peerContext, Flags);
    if (r == CUDA_SUCCESS) {
        struct hook_mem_where w;
        current(&w);
        CUdevice owner;
        __typeof__(&cuCtxGetDevice_v2) of = hook_cu.ctxGetDeviceOf;
        if (w.dev >= 0 && of && of(&owner, peerContext) == CUDA_SUCCESS)
            hook_swap_peer((int)owner, w.dev);
    }
    MEM_LEAVE(r);
}

/* cuMemGetInfo, in the size_t ABI and the 32-bit one: the driver's figures
 * for the current context's device, cut to the limit. */
#define MEM_GET_INFO(abi, type)                                                                    \
    HOOK_EXPORT CUresult abi(type *free_bytes, type *total)                                        \
    {                                                                                              \
        MEM_ENTER(abi, (free_bytes, total));                                                       \
        CUresult r = real_(free_bytes, total);                                                     \
        if (r == CUDA_SUCCESS && hook_cfg.memory_limit) {                                          \
            struct hook_mem_where w;                                                               \
            current(&w);                                                                           \
            uint64_t f = free_bytes ? *free_bytes : 0, t = total ? *total : 0;                     \
            hook_mem_limited(w.dev, &f, &t);                                                       \
            if (free_bytes)                                                                        \
                *free_bytes = (type)f;                                                             \
            if (total)                                                                             \
                *total = (type)t;                                                                  \
        }                                                                                          \
        MEM_LEAVE(r);                                                                              \
    }

MEM_GET_INFO(cuMemGetInfo_v2, size_t)
MEM_GET_INFO(cuMemGetInfo, unsigned int)

/* cuDeviceTotalMem, in both ABIs: the device's size, cut to the limit. */
#define DEVICE_TOTAL_MEM(abi, type)                                                                \
    HOOK_EXPORT CUresult abi(type *bytes, CUdevice dev)                                            \
    {                                                                                              \
        MEM_ENTER(abi, (bytes, dev));                                                              \
        CUresult r = real_(bytes, dev);                                                            \
        if (r == CUDA_SUCCESS && bytes && hook_cfg.memory_limit) {                                 \
            uint64_t t = *bytes;                                                                   \
            hook_mem_limited((int)dev, NULL, &t);                                                  \
            *bytes = (type)t;                                                                      \
        }                                                                                          \
        MEM_LEAVE(r);                                                                              \
    }

DEVICE_TOTAL_MEM(cuDeviceTotalMem_v2, size_t)
DEVICE_TOTAL_MEM(cuDeviceTotalMem, unsigned int)
