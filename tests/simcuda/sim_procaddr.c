/*
 * sim_procaddr.c - cuGetProcAddress (the 4-argument ABI of CUDA 11.3) and
 * cuGetProcAddress_v2 (CUDA 12).  The table lists, for each base name, the
 * CUDA version in which each ABI version appeared (the numbers of
 * cudaTypedefs.h's PFN_<name>_v<version> typedefs) with the function, and
 * its per-thread-default-stream (_ptds/_ptsz) variant where one exists.
 * Every entry is checked at compile time against that PFN typedef, so a
 * wrong version or signature does not build.
 *
 * Lookup: the newest entry whose version <= cudaVersion; flags
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM picks the per-thread
 * variant when there is one (and cudaVersion reaches its version);
 * CU_GET_PROC_ADDRESS_LEGACY_STREAM and CU_GET_PROC_ADDRESS_DEFAULT give
 * the legacy one (the driver cannot see how the caller was compiled, so
 * DEFAULT means legacy here, as for a caller built without
 * CUDA_API_PER_THREAD_DEFAULT_STREAM).  A name not in the table gives
 * CUDA_ERROR_NOT_FOUND / CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND; a name whose
 * first version is newer than cudaVersion gives CUDA_ERROR_NOT_FOUND /
 * CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT; *pfn is NULL in both cases.
 */
#include "sim_internal.h"

#include <cudaTypedefs.h>
#include <string.h>

/* E: plain entry; P: with a per-thread variant (its PFN suffix and
 * version); T: entry whose type is that of another PFN. */
#define SIM_PROC_TABLE(E, P, T)                                                                    \
    E(cuInit, 2000, cuInit)                                                                        \
    E(cuDriverGetVersion, 2020, cuDriverGetVersion)                                                \
    E(cuGetErrorName, 6000, cuGetErrorName)                                                        \
    E(cuGetErrorString, 6000, cuGetErrorString)                                                    \
    E(cuGetProcAddress, 11030, cuGetProcAddress)                                                   \
    E(cuGetProcAddress, 12000, cuGetProcAddress_v2)                                                \
    E(cuDeviceGet, 2000, cuDeviceGet)                                                              \
    E(cuDeviceGetCount, 2000, cuDeviceGetCount)                                                    \
    E(cuDeviceGetName, 2000, cuDeviceGetName)                                                      \
    E(cuDeviceGetUuid, 9020, cuDeviceGetUuid)                                                      \
    E(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2)                                                  \
    E(cuDeviceTotalMem, 2000, cuDeviceTotalMem)                                                    \
    E(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2)                                                 \
    E(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute)                                            \
    E(cuDeviceComputeCapability, 2000, cuDeviceComputeCapability)                                  \
    E(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId)                                              \
    E(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain)                                    \
    E(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease)                                  \
    E(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2)                              \
    E(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset)                                      \
    E(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2)                                  \
    E(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState)                                \
    E(cuDevicePrimaryCtxSetFlags, 7000, cuDevicePrimaryCtxSetFlags)                                \
    E(cuDevicePrimaryCtxSetFlags, 11000, cuDevicePrimaryCtxSetFlags_v2)                            \
    E(cuCtxCreate, 2000, cuCtxCreate)                                                              \
    E(cuCtxCreate, 3020, cuCtxCreate_v2)                                                           \
    E(cuCtxCreate, 11040, cuCtxCreate_v3)                                                          \
    E(cuCtxCreate, 12050, cuCtxCreate_v4)                                                          \
    E(cuCtxDestroy, 2000, cuCtxDestroy)                                                            \
    E(cuCtxDestroy, 4000, cuCtxDestroy_v2)                                                         \
    E(cuCtxSetCurrent, 4000, cuCtxSetCurrent)                                                      \
    E(cuCtxGetCurrent, 4000, cuCtxGetCurrent)                                                      \
    E(cuCtxPushCurrent, 2000, cuCtxPushCurrent)                                                    \
    E(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2)                                                 \
    E(cuCtxPopCurrent, 2000, cuCtxPopCurrent)                                                      \
    E(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2)                                                   \
    E(cuCtxGetDevice, 2000, cuCtxGetDevice)                                                        \
    E(cuCtxGetDevice, 13000, cuCtxGetDevice_v2)                                                    \
    E(cuCtxSynchronize, 2000, cuCtxSynchronize)                                                    \
    E(cuCtxSynchronize, 13000, cuCtxSynchronize_v2)                                                \
    E(cuCtxGetFlags, 7000, cuCtxGetFlags)                                                          \
    E(cuCtxGetApiVersion, 3020, cuCtxGetApiVersion)                                                \
    E(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange)                              \
    E(cuModuleLoad, 2000, cuModuleLoad)                                                            \
    E(cuModuleLoadData, 2000, cuModuleLoadData)                                                    \
    E(cuModuleLoadDataEx, 2010, cuModuleLoadDataEx)                                                \
    E(cuModuleLoadFatBinary, 2000, cuModuleLoadFatBinary)                                          \
    E(cuModuleUnload, 2000, cuModuleUnload)                                                        \
    E(cuModuleGetFunction, 2000, cuModuleGetFunction)                                              \
    E(cuLibraryLoadData, 12000, cuLibraryLoadData)                                                 \
    E(cuLibraryLoadFromFile, 12000, cuLibraryLoadFromFile)                                         \
    E(cuLibraryUnload, 12000, cuLibraryUnload)                                                     \
    E(cuLibraryGetKernel, 12000, cuLibraryGetKernel)                                               \
    E(cuKernelGetFunction, 12000, cuKernelGetFunction)                                             \
    E(cuKernelGetName, 12030, cuKernelGetName)                                                     \
    E(cuFuncGetName, 12030, cuFuncGetName)                                                         \
    E(cuFuncGetAttribute, 2020, cuFuncGetAttribute)                                                \
    E(cuFuncSetAttribute, 9000, cuFuncSetAttribute)                                                \
    E(cuFuncSetCacheConfig, 3000, cuFuncSetCacheConfig)                                            \
    E(cuMemAlloc, 2000, cuMemAlloc)                                                                \
    E(cuMemAlloc, 3020, cuMemAlloc_v2)                                                             \
    E(cuMemAllocPitch, 2000, cuMemAllocPitch)                                                      \
    E(cuMemAllocPitch, 3020, cuMemAllocPitch_v2)                                                   \
    E(cuMemFree, 2000, cuMemFree)                                                                  \
    E(cuMemFree, 3020, cuMemFree_v2)                                                               \
    E(cuMemGetInfo, 2000, cuMemGetInfo)                                                            \
    E(cuMemGetInfo, 3020, cuMemGetInfo_v2)                                                         \
    E(cuMemAllocHost, 2000, cuMemAllocHost)                                                        \
    E(cuMemAllocHost, 3020, cuMemAllocHost_v2)                                                     \
    E(cuMemFreeHost, 2000, cuMemFreeHost)                                                          \
    E(cuMemHostAlloc, 2020, cuMemHostAlloc)                                                        \
    E(cuMemHostGetDevicePointer, 3020, cuMemHostGetDevicePointer_v2)                               \
    E(cuMemAllocManaged, 6000, cuMemAllocManaged)                                                  \
    E(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2)                                         \
    E(cuPointerGetAttribute, 4000, cuPointerGetAttribute)                                          \
    E(cuPointerGetAttributes, 7000, cuPointerGetAttributes)                                        \
    P(cuMemAllocAsync, 11020, cuMemAllocAsync, 11020, ptsz, cuMemAllocAsync_ptsz)                  \
    P(cuMemFreeAsync, 11020, cuMemFreeAsync, 11020, ptsz, cuMemFreeAsync_ptsz)                     \
    P(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync, 11020, ptsz,                        \
      cuMemAllocFromPoolAsync_ptsz)                                                                \
    E(cuMemPoolCreate, 11020, cuMemPoolCreate)                                                     \
    E(cuMemPoolDestroy, 11020, cuMemPoolDestroy)                                                   \
    E(cuMemAddressReserve, 10020, cuMemAddressReserve)                                             \
    E(cuMemAddressFree, 10020, cuMemAddressFree)                                                   \
    E(cuMemCreate, 10020, cuMemCreate)                                                             \
    E(cuMemRelease, 10020, cuMemRelease)                                                           \
    E(cuMemMap, 10020, cuMemMap)                                                                   \
    E(cuMemUnmap, 10020, cuMemUnmap)                                                               \
    E(cuMemSetAccess, 10020, cuMemSetAccess)                                                       \
    E(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity)                         \
    E(cuMemGetAllocationPropertiesFromHandle, 10020, cuMemGetAllocationPropertiesFromHandle)       \
    E(cuMemGetAccess, 10020, cuMemGetAccess)                                                       \
    E(cuMemRetainAllocationHandle, 11000, cuMemRetainAllocationHandle)                             \
    E(cuMemExportToShareableHandle, 10020, cuMemExportToShareableHandle)                           \
    E(cuMemImportFromShareableHandle, 10020, cuMemImportFromShareableHandle)                       \
    E(cuIpcGetMemHandle, 4010, cuIpcGetMemHandle)                                                  \
    E(cuIpcOpenMemHandle, 4010, cuIpcOpenMemHandle)                                                \
    E(cuIpcOpenMemHandle, 11000, cuIpcOpenMemHandle_v2)                                            \
    E(cuIpcCloseMemHandle, 4010, cuIpcCloseMemHandle)                                              \
    P(cuMemcpy, 4000, cuMemcpy, 7000, ptds, cuMemcpy_ptds)                                         \
    P(cuMemcpyAsync, 4000, cuMemcpyAsync, 7000, ptsz, cuMemcpyAsync_ptsz)                          \
    E(cuMemcpyHtoD, 2000, cuMemcpyHtoD)                                                            \
    P(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2, 7000, ptds, cuMemcpyHtoD_v2_ptds)                       \
    E(cuMemcpyDtoH, 2000, cuMemcpyDtoH)                                                            \
    P(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2, 7000, ptds, cuMemcpyDtoH_v2_ptds)                       \
    E(cuMemcpyDtoD, 2000, cuMemcpyDtoD)                                                            \
    P(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2, 7000, ptds, cuMemcpyDtoD_v2_ptds)                       \
    E(cuMemcpyHtoDAsync, 2000, cuMemcpyHtoDAsync)                                                  \
    P(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2, 7000, ptsz, cuMemcpyHtoDAsync_v2_ptsz)        \
    E(cuMemcpyDtoHAsync, 2000, cuMemcpyDtoHAsync)                                                  \
    P(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2, 7000, ptsz, cuMemcpyDtoHAsync_v2_ptsz)        \
    E(cuMemcpyDtoDAsync, 3000, cuMemcpyDtoDAsync)                                                  \
    P(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2, 7000, ptsz, cuMemcpyDtoDAsync_v2_ptsz)        \
    P(cuMemcpy2D, 3020, cuMemcpy2D_v2, 7000, ptds, cuMemcpy2D_v2_ptds)                             \
    P(cuMemcpy2DUnaligned, 3020, cuMemcpy2DUnaligned_v2, 7000, ptds, cuMemcpy2DUnaligned_v2_ptds)  \
    P(cuMemcpy2DAsync, 3020, cuMemcpy2DAsync_v2, 7000, ptsz, cuMemcpy2DAsync_v2_ptsz)              \
    P(cuMemcpy3D, 3020, cuMemcpy3D_v2, 7000, ptds, cuMemcpy3D_v2_ptds)                             \
    P(cuMemcpy3DAsync, 3020, cuMemcpy3DAsync_v2, 7000, ptsz, cuMemcpy3DAsync_v2_ptsz)              \
    P(cuMemcpyPeer, 4000, cuMemcpyPeer, 7000, ptds, cuMemcpyPeer_ptds)                             \
    P(cuMemcpyPeerAsync, 4000, cuMemcpyPeerAsync, 7000, ptsz, cuMemcpyPeerAsync_ptsz)              \
    E(cuMemsetD8, 2000, cuMemsetD8)                                                                \
    P(cuMemsetD8, 3020, cuMemsetD8_v2, 7000, ptds, cuMemsetD8_v2_ptds)                             \
    E(cuMemsetD16, 2000, cuMemsetD16)                                                              \
    P(cuMemsetD16, 3020, cuMemsetD16_v2, 7000, ptds, cuMemsetD16_v2_ptds)                          \
    E(cuMemsetD32, 2000, cuMemsetD32)                                                              \
    P(cuMemsetD32, 3020, cuMemsetD32_v2, 7000, ptds, cuMemsetD32_v2_ptds)                          \
    E(cuMemsetD2D8, 2000, cuMemsetD2D8)                                                            \
    P(cuMemsetD2D8, 3020, cuMemsetD2D8_v2, 7000, ptds, cuMemsetD2D8_v2_ptds)                       \
    E(cuMemsetD2D16, 2000, cuMemsetD2D16)                                                          \
    P(cuMemsetD2D16, 3020, cuMemsetD2D16_v2, 7000, ptds, cuMemsetD2D16_v2_ptds)                    \
    E(cuMemsetD2D32, 2000, cuMemsetD2D32)                                                          \
    P(cuMemsetD2D32, 3020, cuMemsetD2D32_v2, 7000, ptds, cuMemsetD2D32_v2_ptds)                    \
    P(cuMemsetD8Async, 3020, cuMemsetD8Async, 7000, ptsz, cuMemsetD8Async_ptsz)                    \
    P(cuMemsetD16Async, 3020, cuMemsetD16Async, 7000, ptsz, cuMemsetD16Async_ptsz)                 \
    P(cuMemsetD32Async, 3020, cuMemsetD32Async, 7000, ptsz, cuMemsetD32Async_ptsz)                 \
    P(cuMemsetD2D8Async, 3020, cuMemsetD2D8Async, 7000, ptsz, cuMemsetD2D8Async_ptsz)              \
    P(cuMemsetD2D16Async, 3020, cuMemsetD2D16Async, 7000, ptsz, cuMemsetD2D16Async_ptsz)           \
    P(cuMemsetD2D32Async, 3020, cuMemsetD2D32Async, 7000, ptsz, cuMemsetD2D32Async_ptsz)           \
    E(cuStreamCreate, 2000, cuStreamCreate)                                                        \
    E(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority)                                \
    E(cuStreamDestroy, 2000, cuStreamDestroy)                                                      \
    E(cuStreamDestroy, 4000, cuStreamDestroy_v2)                                                   \
    P(cuStreamSynchronize, 2000, cuStreamSynchronize, 7000, ptsz, cuStreamSynchronize_ptsz)        \
    P(cuStreamQuery, 2000, cuStreamQuery, 7000, ptsz, cuStreamQuery_ptsz)                          \
    P(cuStreamWaitEvent, 3020, cuStreamWaitEvent, 7000, ptsz, cuStreamWaitEvent_ptsz)              \
    P(cuStreamAddCallback, 5000, cuStreamAddCallback, 7000, ptsz, cuStreamAddCallback_ptsz)        \
    P(cuLaunchHostFunc, 10000, cuLaunchHostFunc, 10000, ptsz, cuLaunchHostFunc_ptsz)               \
    P(cuStreamGetPriority, 5050, cuStreamGetPriority, 7000, ptsz, cuStreamGetPriority_ptsz)        \
    P(cuStreamGetFlags, 5050, cuStreamGetFlags, 7000, ptsz, cuStreamGetFlags_ptsz)                 \
    P(cuStreamGetCtx, 9020, cuStreamGetCtx, 9020, ptsz, cuStreamGetCtx_ptsz)                       \
    P(cuStreamGetId, 12000, cuStreamGetId, 12000, ptsz, cuStreamGetId_ptsz)                        \
    E(cuEventCreate, 2000, cuEventCreate)                                                          \
    P(cuEventRecord, 2000, cuEventRecord, 7000, ptsz, cuEventRecord_ptsz)                          \
    P(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags, 11010, ptsz,                          \
      cuEventRecordWithFlags_ptsz)                                                                 \
    E(cuEventQuery, 2000, cuEventQuery)                                                            \
    E(cuEventSynchronize, 2000, cuEventSynchronize)                                                \
    E(cuEventElapsedTime, 2000, cuEventElapsedTime)                                                \
    E(cuEventElapsedTime, 12080, cuEventElapsedTime_v2)                                            \
    E(cuEventDestroy, 2000, cuEventDestroy)                                                        \
    E(cuEventDestroy, 4000, cuEventDestroy_v2)                                                     \
    P(cuLaunchKernel, 4000, cuLaunchKernel, 7000, ptsz, cuLaunchKernel_ptsz)                       \
    P(cuLaunchKernelEx, 11060, cuLaunchKernelEx, 11060, ptsz, cuLaunchKernelEx_ptsz)               \
    P(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel, 9000, ptsz,                      \
      cuLaunchCooperativeKernel_ptsz)                                                              \
    P(cuStreamBeginCapture, 10000, cuStreamBeginCapture, 10000, ptsz, cuStreamBeginCapture_ptsz)   \
    P(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2, 10010, ptsz,                           \
      cuStreamBeginCapture_v2_ptsz)                                                                \
    P(cuStreamEndCapture, 10000, cuStreamEndCapture, 10000, ptsz, cuStreamEndCapture_ptsz)         \
    P(cuStreamIsCapturing, 10000, cuStreamIsCapturing, 10000, ptsz, cuStreamIsCapturing_ptsz)      \
    P(cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo, 10010, ptsz,                          \
      cuStreamGetCaptureInfo_ptsz)                                                                 \
    P(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2, 11030, ptsz,                       \
      cuStreamGetCaptureInfo_v2_ptsz)                                                              \
    P(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3, 12030, ptsz,                       \
      cuStreamGetCaptureInfo_v3_ptsz)                                                              \
    E(cuGraphCreate, 10000, cuGraphCreate)                                                         \
    E(cuGraphDestroy, 10000, cuGraphDestroy)                                                       \
    E(cuGraphGetNodes, 10000, cuGraphGetNodes)                                                     \
    E(cuGraphInstantiate, 10000, cuGraphInstantiate)                                               \
    E(cuGraphInstantiate, 11000, cuGraphInstantiate_v2)                                            \
    T(cuGraphInstantiate, 12000, cuGraphInstantiateWithFlags,                                      \
      PFN_cuGraphInstantiateWithFlags_v11040)                                                      \
    E(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags)                             \
    P(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams, 12000, ptsz,              \
      cuGraphInstantiateWithParams_ptsz)                                                           \
    E(cuGraphExecDestroy, 10000, cuGraphExecDestroy)                                               \
    P(cuGraphLaunch, 10000, cuGraphLaunch, 10000, ptsz, cuGraphLaunch_ptsz)                        \
    P(cuGraphUpload, 11010, cuGraphUpload, 11010, ptsz, cuGraphUpload_ptsz)                        \
    E(cuCheckpointProcessGetRestoreThreadId, 12080, cuCheckpointProcessGetRestoreThreadId)         \
    E(cuCheckpointProcessGetState, 12080, cuCheckpointProcessGetState)                             \
    E(cuCheckpointProcessLock, 12080, cuCheckpointProcessLock)                                     \
    E(cuCheckpointProcessCheckpoint, 12080, cuCheckpointProcessCheckpoint)                         \
    E(cuCheckpointProcessRestore, 12080, cuCheckpointProcessRestore)                               \
    E(cuCheckpointProcessUnlock, 12080, cuCheckpointProcessUnlock)

/* compile-time signature checks */
#define SIM_SAME(fn, pfn)                                                                          \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), pfn), #fn " is not " #pfn);
#define CHECK_E(name, ver, fn) SIM_SAME(fn, PFN_##name##_v##ver)
#define CHECK_P(name, ver, fn, ptver, sfx, ptfn)                                                   \
    SIM_SAME(fn, PFN_##name##_v##ver) SIM_SAME(ptfn, PFN_##name##_v##ptver##_##sfx)
#define CHECK_T(name, ver, fn, pfn) SIM_SAME(fn, pfn)
SIM_PROC_TABLE(CHECK_E, CHECK_P, CHECK_T)

struct proc_entry {
    const char *name;
    int version;
    void *fn;
    int pt_version;
    void *pt_fn;
};

#define ROW_E(name, ver, fn)                   {#name, ver, (void *)fn, 0, NULL},
#define ROW_P(name, ver, fn, ptver, sfx, ptfn) {#name, ver, (void *)fn, ptver, (void *)ptfn},
#define ROW_T(name, ver, fn, pfn)              {#name, ver, (void *)fn, 0, NULL},

static const struct proc_entry table[] = {SIM_PROC_TABLE(ROW_E, ROW_P, ROW_T)};

static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ||
        version > SIM_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE; /* newer than this driver: as documented */
    const struct proc_entry *best = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) != 0)
            continue;
        known = 1;
        if (table[i].version <= version && (!best || table[i].version > best->version))
            best = &table[i];
    }
    if (!best) {
        if (status)
            *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) &&
                     !(flags & CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    if (per_thread && best->pt_fn && version >= best->pt_version)
        *pfn = best->pt_fn;
    else
        *pfn = best->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *symbolStatus)
{
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

SIM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}
