/*
 * hook_ipc.h - legacy CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle /
 * cuIpcCloseMemHandle, what torch.multiprocessing shares CUDA tensors
 * with) for memory the swap tier backs, which the driver's legacy IPC does
 * not accept.  The handle names this process and the range; the process
 * that opens it fetches the range's segments as descriptors from a socket
 * this process serves (abstract namespace, same user only, peer checked
 * by the kernel's credentials) and maps them.  A shared range stays
 * resident from then on.  Handles of plain memory go to the driver.
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
