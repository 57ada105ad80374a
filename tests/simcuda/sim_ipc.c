/*
 * sim_ipc.c - legacy CUDA IPC, as far as the simulator goes: it enforces
 * the rule the hook's swap tier works around, that cuIpcGetMemHandle
 * refuses memory mapped through the virtual-memory API
 * (CUDA_ERROR_INVALID_VALUE, as the real driver does), and it does not
 * share cuMemAlloc memory between processes (CUDA_ERROR_NOT_SUPPORTED).
 * Opening and closing handles it did not make fail likewise.
 */
#include "sim_internal.h"

static CUresult get_handle(CUipcMemHandle *h, CUdeviceptr p)
{
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    uintptr_t base;
    size_t size;
    int kind = sim_pointer_find_locked((uintptr_t)p, &base, &size);
    sim_unlock();
    if (kind == 1)
        return CUDA_ERROR_NOT_SUPPORTED; /* cuMemAlloc memory: not simulated */
    return CUDA_ERROR_INVALID_VALUE;     /* a VMM mapping, or not device memory */
}

SIM_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    SIM_GATED(get_handle(pHandle, dptr));
}

SIM_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                          unsigned int Flags)
{
    (void)pdptr, (void)handle, (void)Flags;
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                       unsigned int Flags)
{
    return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

SIM_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    (void)dptr;
    return CUDA_ERROR_INVALID_VALUE;
}
