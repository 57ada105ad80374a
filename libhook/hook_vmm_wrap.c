/*
 * hook_vmm_wrap.c - the wrappers of the program's own virtual-memory calls
 * (cuMemMap, cuMemUnmap, cuMemRelease, cuMemSetAccess, cuMemGetAccess,
 * cuMemExportToShareableHandle, cuMemGetAllocationPropertiesFromHandle,
 * cuMemRetainAllocationHandle; cuMemCreate is in hook_mem_wrap.c).
 *
 * The swap tier adopts the program's mappings so that they move like the
 * tier's own allocations (PyTorch's expandable segments map all of their
 * memory this way): the engine makes each call under its lock and
 * translates the program's handles, whose memory is a new handle to the
 * driver after it has been out (libhook/swap/swap_vmm.c).  A call that
 * would touch memory that is out waits, as a kernel launch would, until
 * the broker has given the GPU and the memory back, then runs.  Without
 * the tier (GPUSHARE_SWAP=off) every call goes to the driver as it is.
 * What the calls make and free is counted by hook_mem.c.
 */
#include <stdint.h>

#include "hook_config.h"
#include "hook_mem.h"
#include "hook_real.h"
#include "hook_submit.h"
#include "hook_swap.h"
#include "hook_wrap.h"
#include "log.h"

#define MEM_ENTER(abi, args) HOOK_WRAP_ENTER_UNLESS(abi, args, hook_cfg.disabled)
#define MEM_LEAVE(r)         HOOK_WRAP_LEAVE(r)

/* Bringing the memory back may race with it going out again (the broker
 * parks an idle process); a few rounds settle it, and a process whose
 * broker is gone has its memory back by itself (hook_swap_recover). */
#define BACK_TRIES 50

/* Runs `call` (an engine call of swap_engine.h that sets dev_) into v
 * until it is no longer GS_SWAP_VMM_PARKED, bringing GPU dev_ back in
 * between; PARKED after BACK_TRIES rounds. */
#define ENGINE_CALL(v, call)                                                                       \
    for (int k_ = 0, dev_ = -1;; k_++, dev_ = -1) {                                                \
        (v) = (call);                                                                              \
        if ((v) != GS_SWAP_VMM_PARKED || k_ == BACK_TRIES)                                         \
            break;                                                                                 \
        hook_submit_wait_gpu(dev_);                                                                \
    }

/* The result of a call the engine could not make: its memory stayed out. */
static CUresult still_out(const char *call)
{
    gs_warn("%s: the memory it names is still in host memory after %d tries to bring it back", call,
            BACK_TRIES);
    return CUDA_ERROR_NOT_READY;
}

static CUcontext current_ctx(void)
{
    CUcontext c = NULL;
    if (!hook_cu.ctxGetCurrent || hook_cu.ctxGetCurrent(&c) != CUDA_SUCCESS)
        c = NULL;
    return c;
}

HOOK_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    MEM_ENTER(cuMemMap, (ptr, size, offset, handle, flags));
    gs_swap_engine_t *e = hook_swap_engine();
    gs_swap_vmm_t v = GS_SWAP_VMM_PASS;
    CUresult r = CUDA_SUCCESS;
    if (e) {
        CUcontext ctx = current_ctx();
        ENGINE_CALL(v, gs_swap_vmm_map(e, ctx, ptr, size, offset, handle, flags, &r, &dev_));
    }
    if (v == GS_SWAP_VMM_PASS)
        r = real_(ptr, size, offset, handle, flags);
    else if (v == GS_SWAP_VMM_PARKED)
        r = still_out("cuMemMap");
    if (r == CUDA_SUCCESS)
        hook_mem_mapped(ptr, size, handle);
    MEM_LEAVE(r);
}

HOOK_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    MEM_ENTER(cuMemUnmap, (ptr, size));
    gs_swap_engine_t *e = hook_swap_engine();
    gs_swap_vmm_t v = GS_SWAP_VMM_PASS;
    CUresult r = CUDA_SUCCESS;
    struct hook_mem_unmap u;
    hook_mem_unmap_begin(ptr, size, &u);
    if (e)
        ENGINE_CALL(v, gs_swap_vmm_unmap(e, ptr, size, &r, &dev_));
    if (v == GS_SWAP_VMM_PASS)
        r = real_(ptr, size);
    else if (v == GS_SWAP_VMM_PARKED)
        r = still_out("cuMemUnmap");
    hook_mem_unmap_end(&u, r);
    MEM_LEAVE(r);
}

/* The physical memory is freed now when nothing maps it, else at the last
 * cuMemUnmap. */
HOOK_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    MEM_ENTER(cuMemRelease, (handle));
    gs_swap_engine_t *e = hook_swap_engine();
    gs_swap_vmm_t v = GS_SWAP_VMM_PASS;
    CUresult r = CUDA_SUCCESS;
    struct hook_mem_release rel;
    hook_mem_release_begin(handle, &rel);
    if (e)
        ENGINE_CALL(v, gs_swap_vmm_release(e, handle, &r, &dev_));
    if (v == GS_SWAP_VMM_PASS)
        r = real_(handle);
    else if (v == GS_SWAP_VMM_PARKED)
        r = still_out("cuMemRelease");
    hook_mem_release_end(handle, &rel, r);
    MEM_LEAVE(r);
}

HOOK_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                    size_t count)
{
    MEM_ENTER(cuMemSetAccess, (ptr, size, desc, count));
    gs_swap_engine_t *e = hook_swap_engine();
    gs_swap_vmm_t v = GS_SWAP_VMM_PASS;
    CUresult r = CUDA_SUCCESS;
    if (e)
        ENGINE_CALL(v, gs_swap_vmm_set_access(e, ptr, size, desc, count, &r, &dev_));
    if (v == GS_SWAP_VMM_PASS)
        r = real_(ptr, size, desc, count);
    else if (v == GS_SWAP_VMM_PARKED)
        r = still_out("cuMemSetAccess");
    MEM_LEAVE(r);
}

HOOK_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                    CUdeviceptr ptr)
{
    MEM_ENTER(cuMemGetAccess, (flags, location, ptr));
    gs_swap_engine_t *e = hook_swap_engine();
    gs_swap_vmm_t v = GS_SWAP_VMM_PASS;
    if (e)
        ENGINE_CALL(v, gs_swap_vmm_touch(e, ptr, 1, &dev_));
    CUresult r =
        v == GS_SWAP_VMM_PARKED ? still_out("cuMemGetAccess") : real_(flags, location, ptr);
    MEM_LEAVE(r);
}

/* Calls that pass a handle on get the one the driver knows now. */
#define WITH_REAL_HANDLE(abi, fix, handle, call)                                                   \
    gs_swap_engine_t *e = hook_swap_engine();                                                      \
    gs_swap_vmm_t v = GS_SWAP_VMM_PASS;                                                            \
    CUmemGenericAllocationHandle real = (handle);                                                  \
    if (e)                                                                                         \
        ENGINE_CALL(v, gs_swap_vmm_handle(e, (handle), (fix), &real, &dev_));                      \
    CUresult r = v == GS_SWAP_VMM_PARKED ? still_out(#abi) : (call);                               \
    MEM_LEAVE(r)

/* Shared with another process: from now on it stays on the GPU. */
HOOK_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle,
                                                  CUmemGenericAllocationHandle handle,
                                                  CUmemAllocationHandleType handleType,
                                                  unsigned long long flags)
{
    MEM_ENTER(cuMemExportToShareableHandle, (shareableHandle, handle, handleType, flags));
    WITH_REAL_HANDLE(cuMemExportToShareableHandle, 1, handle,
                     real_(shareableHandle, real, handleType, flags));
}

HOOK_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                            CUmemGenericAllocationHandle handle)
{
    MEM_ENTER(cuMemGetAllocationPropertiesFromHandle, (prop, handle));
    WITH_REAL_HANDLE(cuMemGetAllocationPropertiesFromHandle, 0, handle, real_(prop, real));
}

/* The handle of an adopted mapping comes back under the program's name,
 * and the mapping stays on the GPU from now on. */
HOOK_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    MEM_ENTER(cuMemRetainAllocationHandle, (handle, addr));
    gs_swap_engine_t *e = hook_swap_engine();
    gs_swap_vmm_t v = GS_SWAP_VMM_PASS;
    CUresult r = CUDA_SUCCESS;
    if (e && handle)
        ENGINE_CALL(v, gs_swap_vmm_retain(e, handle, (CUdeviceptr)(uintptr_t)addr, &r, &dev_));
    if (v == GS_SWAP_VMM_PASS)
        r = real_(handle, addr);
    else if (v == GS_SWAP_VMM_PARKED)
        r = still_out("cuMemRetainAllocationHandle");
    MEM_LEAVE(r);
}
