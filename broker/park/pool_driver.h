/*
 * pool_driver.h - the driver calls behind the host pool (host_pool.h):
 * pinning a chunk of host memory on a GPU's NUMA node with cuMemCreate
 * (CU_MEM_LOCATION_TYPE_HOST_NUMA, POSIX file-descriptor handles),
 * exporting it as a descriptor for a notebook process, zeroing it with
 * the CPU, and giving it back.
 *
 * None of these needs a CUDA context: measured on the H200 (driver 580,
 * bench/swap_probe.c), host cuMemCreate, export, and a CPU mapping through
 * cuMemMap + cuMemSetAccess(HOST_NUMA) all work right after cuInit with no
 * context current, so the broker's own GPU footprint stays zero and it
 * never appears as a process on the GPU.
 *
 * Resolved with dlsym from the libcuda the broker loaded for its GPU
 * inventory (RTLD_NOLOAD); without the calls (an old driver) the pool is
 * unavailable and parking keeps to the checkpoint tier.
 */
#ifndef GS_POOL_DRIVER_H
#define GS_POOL_DRIVER_H

#include <stddef.h>
#include <stdint.h>

typedef struct gs_pool_driver gs_pool_driver_t;

/* The calls for GPU `gpu` (its NUMA node from the driver, 0 when it has
 * none), or NULL with why set. */
gs_pool_driver_t *gs_pool_driver_load(int gpu, char *why, size_t whylen);
void gs_pool_driver_free(gs_pool_driver_t **self_p);

/* The host NUMA node the chunks are pinned on. */
int gs_pool_driver_numa(const gs_pool_driver_t *self);

/* Each returns 0, or -1 with err set ("cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY").
 * A handle is the driver's CUmemGenericAllocationHandle. */
int gs_pool_driver_pin(gs_pool_driver_t *self, size_t bytes, uint64_t *handle, char *err,
                       size_t errlen);
int gs_pool_driver_unpin(gs_pool_driver_t *self, uint64_t handle, char *err, size_t errlen);
/* Maps the chunk for the CPU (read and write) at *cpu, for the disk tier's
 * copies; gs_pool_driver_unmap undoes it.  Any thread may call these. */
int gs_pool_driver_map(gs_pool_driver_t *self, uint64_t handle, size_t bytes, void **cpu, char *err,
                       size_t errlen);
void gs_pool_driver_unmap(gs_pool_driver_t *self, void *cpu, size_t bytes);
/* Overwrites the chunk with zeros through a CPU mapping made for the call. */
int gs_pool_driver_zero(gs_pool_driver_t *self, uint64_t handle, size_t bytes, char *err,
                        size_t errlen);
/* A new descriptor for the chunk (the caller closes it). */
int gs_pool_driver_export(gs_pool_driver_t *self, uint64_t handle, int *fd, char *err,
                          size_t errlen);

#endif
