/*
 * gpu_free.c - a GPU's free memory from NVML (gpu_free.h).
 */
#include "gpu_free.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

/* NVML's types as nvml.h declares them (the header is not needed to build). */
typedef int nvml_return_t;
typedef void *nvml_device_t;
typedef struct {
    unsigned long long total, free, used;
} nvml_memory_t;

static struct {
    nvml_return_t (*by_uuid)(const char *, nvml_device_t *);
    nvml_return_t (*memory)(nvml_device_t, nvml_memory_t *);
    int ready;
} nvml;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return;
    nvml_return_t (*init)(void) = (nvml_return_t(*)(void))dlsym(lib, "nvmlInit_v2");
    nvml.by_uuid =
        (nvml_return_t(*)(const char *, nvml_device_t *))dlsym(lib, "nvmlDeviceGetHandleByUUID");
    nvml.memory =
        (nvml_return_t(*)(nvml_device_t, nvml_memory_t *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
    /* NVML stays loaded and initialised for the broker's life. */
    nvml.ready = init && nvml.by_uuid && nvml.memory && init() == 0;
}

int gs_gpu_free_read(const char *uuid, uint64_t *free_bytes, uint64_t *total_bytes)
{
    pthread_once(&once, load);
    nvml_device_t dev = NULL;
    nvml_memory_t m;
    if (!nvml.ready || !uuid || nvml.by_uuid(uuid, &dev) != 0 || nvml.memory(dev, &m) != 0)
        return -1;
    *free_bytes = m.free;
    *total_bytes = m.total;
    return 0;
}

uint64_t gs_gpu_free_restore_margin(uint64_t total_bytes)
{
    uint64_t margin = total_bytes / 64;
    return margin < (1ULL << 30) ? margin : (1ULL << 30);
}
