/*
 * hook_ipc.h - legacy CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle /
 * cuIpcCloseMemHandle, what torch.multiprocessing shares CUDA tensors
 * with) for memory the swap tier backs, which the driver's legacy IPC does
 * not accept.  The handle names this process and the range and carries
 * the range's keys (hook_ipc_handle.h); the process that opens it checks
 * that this process serves it (the kernel's credentials of the socket,
 * abstract namespace), fetches the range's segments as descriptors with
 * the handle's key and maps them.  A shared range stays resident from
 * then on.  Handles of plain memory go to the driver.
 */
#ifndef GS_HOOK_IPC_H
#define GS_HOOK_IPC_H

#include <cuda.h>

/* Each returns 1 when it handled the call (the result in *r), 0 when the
 * driver should. */
int hook_ipc_get(CUipcMemHandle *handle, CUdeviceptr p, CUresult *r);
int hook_ipc_open(CUdeviceptr *p, const CUipcMemHandle *handle, CUresult *r);
int hook_ipc_close(CUdeviceptr p, CUresult *r);

#endif
