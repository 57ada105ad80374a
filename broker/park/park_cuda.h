/*
 * park_cuda.h - the driver's checkpoint API (cuCheckpointProcess*, driver
 * >= 570), acting on another process: lock it (its CUDA calls block, its
 * queued work completes), checkpoint it (device memory to host memory, the
 * GPU's memory freed), restore it (same addresses, bit-exact) and unlock.
 *
 * Resolved with dlsym from the libcuda the broker loaded for its GPU
 * inventory (dlopen RTLD_NOLOAD: the same library, never a second one), so
 * the broker runs with parking off on drivers without the API.  Calls may
 * take seconds (tens of GB at a few GB/s): only the park worker threads
 * make them, never the event loop.
 */
#ifndef GS_PARK_CUDA_H
#define GS_PARK_CUDA_H

#include <stddef.h>

typedef struct gs_park_cuda gs_park_cuda_t;

/* Process states, as CUprocessState. */
enum { GS_PROC_RUNNING = 0, GS_PROC_LOCKED = 1, GS_PROC_CHECKPOINTED = 2, GS_PROC_FAILED = 3 };

/* The API from the loaded libcuda, or NULL with why set (no driver, too
 * old a driver). */
gs_park_cuda_t *gs_park_cuda_load(char *why, size_t whylen);
void gs_park_cuda_free(gs_park_cuda_t **api_p);

/* Each returns the CUresult (0 = success); on failure err gets
 * "cuCheckpointProcessLock: CUDA_ERROR_TIMEOUT". */
int gs_park_cuda_lock(gs_park_cuda_t *api, int pid, unsigned timeout_ms, char *err, size_t errlen);
int gs_park_cuda_checkpoint(gs_park_cuda_t *api, int pid, char *err, size_t errlen);
int gs_park_cuda_restore(gs_park_cuda_t *api, int pid, char *err, size_t errlen);
/* Restore onto other GPUs (CUcheckpointRestoreArgs.gpuPairs, CUDA 13): the
 * driver (580, two H200s) wants every GPU of the machine named once as old
 * and once as new, a permutation; one pair alone is CUDA_ERROR_INVALID_VALUE
 * and leaves the process checkpointed. */
#define GS_PARK_MAX_PAIRS 16
typedef struct {
    unsigned char old_uuid[16], new_uuid[16];
} gs_park_gpu_pair_t;
int gs_park_cuda_restore_onto(gs_park_cuda_t *api, int pid, const gs_park_gpu_pair_t *pairs, int n,
                              char *err, size_t errlen);
int gs_park_cuda_unlock(gs_park_cuda_t *api, int pid, char *err, size_t errlen);
int gs_park_cuda_state(gs_park_cuda_t *api, int pid, int *state, char *err, size_t errlen);

#endif
