/*
 * sim_nvml.c - the little of NVML that the broker reads: a GPU's free
 * memory, which needs no CUDA context (nvmlDeviceGetMemoryInfo).  The
 * build also names this library libnvidia-ml.so.1 (Makefile.am), as the
 * driver package installs NVML beside libcuda, so that the broker's
 * dlopen("libnvidia-ml.so.1") finds it on the simulated GPU.
 *
 * Free memory is the capacity less what the living processes hold on the
 * device (the dead ones' memory is reclaimed first, as the real driver
 * frees it once their process is gone).  Devices are found by their UUID
 * string, as cuDeviceGetUuid gives it ("GPU-…").
 */
#include "sim_internal.h"

#include <stdint.h>
#include <string.h>

/* NVML's types, as nvml.h declares them (not included: a test double of
 * its own). */
typedef int sim_nvml_return_t; /* nvmlReturn_t: 0 success */
enum {
    NVML_OK = 0,
    NVML_UNINITIALIZED = 1,
    NVML_INVALID_ARGUMENT = 2,
    NVML_NOT_FOUND = 6,
};
typedef struct {
    unsigned long long total, free, used;
} sim_nvml_memory_t;

SIM_EXPORT sim_nvml_return_t nvmlInit_v2(void);
SIM_EXPORT sim_nvml_return_t nvmlShutdown(void);
SIM_EXPORT const char *nvmlErrorString(sim_nvml_return_t r);
SIM_EXPORT sim_nvml_return_t nvmlDeviceGetHandleByUUID(const char *uuid, void **device);
SIM_EXPORT sim_nvml_return_t nvmlDeviceGetMemoryInfo(void *device, sim_nvml_memory_t *memory);

SIM_EXPORT sim_nvml_return_t nvmlInit_v2(void)
{
    return sim_have_segment() ? NVML_OK : NVML_UNINITIALIZED;
}

SIM_EXPORT sim_nvml_return_t nvmlShutdown(void)
{
    return NVML_OK;
}

SIM_EXPORT const char *nvmlErrorString(sim_nvml_return_t r)
{
    switch (r) {
    case NVML_OK:
        return "Success";
    case NVML_UNINITIALIZED:
        return "Uninitialized";
    case NVML_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_NOT_FOUND:
        return "Not Found";
    default:
        return "Unknown Error";
    }
}

/* Handles are the physical device index + 1. */
SIM_EXPORT sim_nvml_return_t nvmlDeviceGetHandleByUUID(const char *uuid, void **device)
{
    if (!uuid || !device)
        return NVML_INVALID_ARGUMENT;
    if (!atomic_load(&sim_g.initialised) || !sim_have_segment())
        return NVML_UNINITIALIZED;
    for (int d = 0; d < sim_g.cfg.devices && d < SIM_MAX_DEVICES; d++) {
        CUuuid u;
        char s[SIM_UUID_STRLEN];
        sim_device_uuid(d, &u);
        sim_uuid_string(&u, s);
        if (strcmp(s, uuid) == 0) {
            *device = (void *)(uintptr_t)(d + 1);
            return NVML_OK;
        }
    }
    return NVML_NOT_FOUND;
}

SIM_EXPORT sim_nvml_return_t nvmlDeviceGetMemoryInfo(void *device, sim_nvml_memory_t *memory)
{
    int d = (int)(uintptr_t)device - 1;
    if (!memory || d < 0 || d >= SIM_MAX_DEVICES)
        return NVML_INVALID_ARGUMENT;
    if (!sim_have_segment())
        return NVML_UNINITIALIZED;
    sim_shm_lock();
    sim_reclaim_dead_locked();
    uint64_t cap = sim_seg->capacity, used = sim_seg->used[d];
    sim_shm_unlock();
    memory->total = cap;
    memory->used = used < cap ? used : cap;
    memory->free = cap - memory->used;
    return NVML_OK;
}
