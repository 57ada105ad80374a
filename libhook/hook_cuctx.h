/*
 * hook_cuctx.h - which GPU a stream or context belongs to, and what the
 * GPUs are called.
 */
#ifndef GS_HOOK_CUCTX_H
#define GS_HOOK_CUCTX_H

#include "hook_cuda.h"

/* Device and context of stream s (already normalised). 0, or -1. */
int hook_cuctx_stream_where(CUstream s, CUcontext *ctx, int *dev);
int hook_cuctx_stream_capturing(CUstream s);
/* Contexts the program created or retained, remembered with their device
 * so that most lookups need no driver call. */
void hook_cuctx_note(CUcontext ctx, int dev, int primary);
int hook_cuctx_device(CUcontext ctx);
CUcontext hook_cuctx_primary(int dev);
void hook_cuctx_forget(CUcontext ctx);
/* Reads the devices' UUIDs into the gate's device table, once the driver
 * is initialised. */
void hook_cuctx_enumerate(void);
void hook_cuctx_atfork_prepare(void);
void hook_cuctx_atfork_parent(void);
void hook_cuctx_atfork_child(void);

#endif
