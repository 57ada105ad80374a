/*
 * gpu_free.h - how much memory a GPU has free now, by its UUID, from NVML
 * (nvmlDeviceGetMemoryInfo: no CUDA context needed, so the broker spends
 * no GPU memory to ask).
 *
 * Why the park worker and gpushare-restore ask before a restore: on the H100 with driver 580 a
 * cuCheckpointProcessRestore that runs out of GPU memory leaves the process
 * checkpointed for good (every later restore: CUDA_ERROR_OPERATING_SYSTEM;
 * unlock: CUDA_ERROR_ILLEGAL_STATE; tests/gpu/restore_oom_probe.py), so a
 * restore is tried only where the memory is free, by the driver's count,
 * not only by the broker's (an exiting process' memory is freed some time
 * after its pid is gone).
 *
 * NVML is loaded once (dlopen libnvidia-ml.so.1, which the driver package
 * installs beside libcuda; the simulated driver provides it too) and is
 * safe to call from any thread.
 */
#ifndef GS_GPU_FREE_H
#define GS_GPU_FREE_H

#include <stdint.h>

/* 0 with the GPU's free and total bytes; -1 where NVML is not there or
 * does not know the GPU (then nothing is known: the caller decides). */
int gs_gpu_free_read(const char *uuid, uint64_t *free_bytes, uint64_t *total_bytes);

/* What a restore needs free on a GPU of total_bytes beside the memory it
 * brings back: room for the contexts, a sixty-fourth of the GPU, 1 GiB at
 * most (an H100's context is about 0.5 GiB).  Asked by the broker before a
 * restore (broker/park/park_jobs.c) and by the restore helper before it
 * tries (libhook/restore/restore_main.c), so that both agree. */
uint64_t gs_gpu_free_restore_margin(uint64_t total_bytes);

#endif
