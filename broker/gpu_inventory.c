/*
 * gpu_inventory.c - enumerate GPUs through a dlopen'ed libcuda (see .h).
 */
#include "gpu_inventory.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*version_fn)(int *);
typedef CUresult (*count_fn)(int *);
typedef CUresult (*get_fn)(CUdevice *, int);
typedef CUresult (*name_fn)(char *, int, CUdevice);
typedef CUresult (*uuid_fn)(CUuuid *, CUdevice);
typedef CUresult (*totalmem_fn)(size_t *, CUdevice);

void gs_gpu_format_uuid(const unsigned char b[16], char *out, unsigned long outlen)
{
    snprintf(out, outlen,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
}

static void no_gpus(gs_gpu_inventory_t *inv, const char *why)
{
    inv->count = 0;
    snprintf(inv->problem, sizeof inv->problem, "%s", why);
}

void gs_gpu_inventory_load(gs_gpu_inventory_t *inv)
{
    memset(inv, 0, sizeof *inv);
    const char *path = getenv("GPUSHARE_LIBCUDA");
    /* The handle is kept open for the broker's lifetime on purpose: the
     * parking code calls the checkpoint API through the same library. */
    void *lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        snprintf(inv->driver, sizeof inv->driver, "none");
        no_gpus(inv, "no NVIDIA driver (libcuda.so.1 not found)");
        return;
    }
    inv->simulated = dlsym(lib, "gpusim_is_simulated") != NULL;
    snprintf(inv->driver, sizeof inv->driver, "%s", inv->simulated ? "simulated" : "nvidia");

    init_fn cu_init = (init_fn)dlsym(lib, "cuInit");
    version_fn cu_version = (version_fn)dlsym(lib, "cuDriverGetVersion");
    count_fn cu_count = (count_fn)dlsym(lib, "cuDeviceGetCount");
    get_fn cu_get = (get_fn)dlsym(lib, "cuDeviceGet");
    name_fn cu_name = (name_fn)dlsym(lib, "cuDeviceGetName");
    uuid_fn cu_uuid = (uuid_fn)dlsym(lib, "cuDeviceGetUuid_v2");
    if (!cu_uuid)
        cu_uuid = (uuid_fn)dlsym(lib, "cuDeviceGetUuid");
    totalmem_fn cu_totalmem = (totalmem_fn)dlsym(lib, "cuDeviceTotalMem_v2");
    if (!cu_init || !cu_version || !cu_count || !cu_get || !cu_name || !cu_uuid || !cu_totalmem) {
        no_gpus(inv, "libcuda.so.1 lacks the device query API");
        return;
    }
    CUresult rc = cu_init(0);
    if (rc != CUDA_SUCCESS) {
        char why[96];
        snprintf(why, sizeof why, "cuInit failed with CUDA error %d", (int)rc);
        no_gpus(inv, why);
        return;
    }
    cu_version(&inv->driver_version);
    int n = 0;
    if (cu_count(&n) != CUDA_SUCCESS || n <= 0) {
        no_gpus(inv, "the driver reports no GPUs");
        return;
    }
    if (n > GS_MAX_GPUS)
        n = GS_MAX_GPUS;
    for (int i = 0; i < n; i++) {
        gs_gpu_t *g = &inv->gpus[inv->count];
        CUdevice dev;
        CUuuid uuid;
        size_t total = 0;
        if (cu_get(&dev, i) != CUDA_SUCCESS || cu_uuid(&uuid, dev) != CUDA_SUCCESS)
            continue;
        g->index = i;
        if (cu_name(g->name, (int)sizeof g->name, dev) != CUDA_SUCCESS)
            snprintf(g->name, sizeof g->name, "GPU %d", i);
        memcpy(g->uuid_bytes, uuid.bytes, sizeof g->uuid_bytes);
        gs_gpu_format_uuid(g->uuid_bytes, g->uuid, sizeof g->uuid);
        cu_totalmem(&total, dev);
        g->memory_total = total;
        inv->count++;
    }
}

int gs_gpu_inventory_find(const gs_gpu_inventory_t *inv, const char *uuid)
{
    for (int i = 0; i < inv->count; i++)
        if (strcmp(inv->gpus[i].uuid, uuid) == 0)
            return i;
    return -1;
}
