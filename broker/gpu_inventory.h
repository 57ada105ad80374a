/*
 * gpu_inventory.h - the GPUs this machine has, found through the CUDA driver.
 *
 * The broker loads libcuda at run time (dlopen), so one binary works on a
 * GPU server, on a machine without a driver (no GPUs, everything runs
 * ungated) and on the simulated driver of the test suite, which it detects
 * by its gpusim_is_simulated export and reports as such everywhere.  It
 * never creates a CUDA context: that would cost every GPU hundreds of MiB.
 */
#ifndef GS_GPU_INVENTORY_H
#define GS_GPU_INVENTORY_H

#include <stdint.h>

#define GS_MAX_GPUS 16

typedef struct {
    int index;
    char uuid[48];                /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    unsigned char uuid_bytes[16]; /* the driver's CUuuid, which uuid formats */
    char name[96];
    uint64_t memory_total;
} gs_gpu_t;

typedef struct {
    int count;
    int simulated;      /* the test suite's simulated driver */
    int driver_version; /* cuDriverGetVersion, 0 without a driver */
    char driver[24];    /* "nvidia", "simulated" or "none" */
    char problem[160];  /* why there are no GPUs, when there are none */
    gs_gpu_t gpus[GS_MAX_GPUS];
} gs_gpu_inventory_t;

/* Fill inv from libcuda.so.1 (or GPUSHARE_LIBCUDA, a path).  Always
 * succeeds: without a driver, count is 0 and problem says why. */
void gs_gpu_inventory_load(gs_gpu_inventory_t *inv);

/* Index of the GPU with this UUID, or -1. */
int gs_gpu_inventory_find(const gs_gpu_inventory_t *inv, const char *uuid);

/* Format a CUuuid's 16 bytes the way nvidia-smi does. */
void gs_gpu_format_uuid(const unsigned char bytes[16], char *out, unsigned long outlen);

#endif
