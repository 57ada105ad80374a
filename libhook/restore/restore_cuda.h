/*
 * restore_cuda.h - the CUDA driver for gpushare-restore: libcuda.so.1 (or
 * GPUSHARE_LIBCUDA) opened with dlopen, cuInit and the checkpoint calls
 * it needs resolved with dlsym, so the helper builds without the CUDA
 * libraries and says clearly what a driver lacks.
 */
#ifndef GS_RESTORE_CUDA_H
#define GS_RESTORE_CUDA_H

#include <stddef.h>

#include "restore_loop.h"

/* Loads and initialises the driver and fills the driver entries of *ops
 * (state, restore, unlock, error_name); 0, or the reason in why and 1 when
 * the driver has no checkpoint API (then no process can be on the
 * checkpoint tier), -1 on any other failure. */
int gs_restore_cuda_load(gs_restore_ops_t *ops, char *why, size_t whylen);

#endif
