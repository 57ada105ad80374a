/*
 * park_cuda.c - the checkpoint API through dlsym (see park_cuda.h).
 *
 * The argument structs are declared here with cuda.h's layouts (all
 * reserved fields zero), so the broker builds against CUDA headers older
 * than 12.8 too; only the symbols' presence at run time matters.
 */
#include "park_cuda.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned int timeoutMs;
    unsigned int reserved0;
    uint64_t reserved1[7];
} lock_args_t;

typedef struct {
    uint64_t reserved[8];
} plain_args_t; /* checkpoint, unlock; restore's is the same size (64 bytes) */

typedef struct {
    unsigned char old_uuid[16], new_uuid[16];
} gpu_pair_t; /* CUcheckpointGpuPair */

typedef struct {
    gpu_pair_t *gpuPairs;
    unsigned int gpuPairsCount;
    char reserved[52 - sizeof(gpu_pair_t *)];
    uint64_t reserved1;
} restore_args_t; /* CUcheckpointRestoreArgs (CUDA 13) */

typedef int (*lock_fn)(int, lock_args_t *);
typedef int (*step_fn)(int, plain_args_t *);
typedef int (*state_fn)(int, int *);
typedef int (*errname_fn)(int, const char **);

struct gs_park_cuda {
    void *lib;
    lock_fn lock;
    step_fn checkpoint, restore, unlock;
    state_fn state;
    errname_fn errname;
};

gs_park_cuda_t *gs_park_cuda_load(char *why, size_t whylen)
{
    const char *path = getenv("GPUSHARE_LIBCUDA");
    void *lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) {
        snprintf(why, whylen, "no NVIDIA driver loaded");
        return NULL;
    }
    gs_park_cuda_t *a = calloc(1, sizeof *a);
    if (!a) {
        dlclose(lib);
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    a->lib = lib;
    a->lock = (lock_fn)dlsym(lib, "cuCheckpointProcessLock");
    a->checkpoint = (step_fn)dlsym(lib, "cuCheckpointProcessCheckpoint");
    a->restore = (step_fn)dlsym(lib, "cuCheckpointProcessRestore");
    a->unlock = (step_fn)dlsym(lib, "cuCheckpointProcessUnlock");
    a->state = (state_fn)dlsym(lib, "cuCheckpointProcessGetState");
    a->errname = (errname_fn)dlsym(lib, "cuGetErrorName");
    if (!a->lock || !a->checkpoint || !a->restore || !a->unlock || !a->state) {
        snprintf(why, whylen,
                 "the driver has no checkpoint API (cuCheckpointProcess*: driver 570 or newer)");
        gs_park_cuda_free(&a);
        return NULL;
    }
    return a;
}

void gs_park_cuda_free(gs_park_cuda_t **api_p)
{
    gs_park_cuda_t *a = *api_p;
    if (!a)
        return;
    dlclose(a->lib); /* only drops the reference RTLD_NOLOAD took */
    free(a);
    *api_p = NULL;
}

static int result(gs_park_cuda_t *a, const char *fn, int rc, char *err, size_t errlen)
{
    if (rc == 0)
        return 0;
    const char *name = NULL;
    if (a->errname && a->errname(rc, &name) != 0)
        name = NULL;
    if (name)
        snprintf(err, errlen, "%s: %s", fn, name);
    else
        snprintf(err, errlen, "%s: CUDA error %d", fn, rc);
    return rc;
}

int gs_park_cuda_lock(gs_park_cuda_t *a, int pid, unsigned timeout_ms, char *err, size_t errlen)
{
    lock_args_t args;
    memset(&args, 0, sizeof args);
    args.timeoutMs = timeout_ms;
    return result(a, "cuCheckpointProcessLock", a->lock(pid, &args), err, errlen);
}

int gs_park_cuda_checkpoint(gs_park_cuda_t *a, int pid, char *err, size_t errlen)
{
    return result(a, "cuCheckpointProcessCheckpoint", a->checkpoint(pid, NULL), err, errlen);
}

int gs_park_cuda_restore(gs_park_cuda_t *a, int pid, char *err, size_t errlen)
{
    return result(a, "cuCheckpointProcessRestore", a->restore(pid, NULL), err, errlen);
}

int gs_park_cuda_restore_onto(gs_park_cuda_t *a, int pid, const gs_park_gpu_pair_t *pairs, int n,
                              char *err, size_t errlen)
{
    gpu_pair_t pv[GS_PARK_MAX_PAIRS];
    restore_args_t args;
    memset(&args, 0, sizeof args);
    for (int i = 0; i < n && i < GS_PARK_MAX_PAIRS; i++) {
        memcpy(pv[i].old_uuid, pairs[i].old_uuid, 16);
        memcpy(pv[i].new_uuid, pairs[i].new_uuid, 16);
    }
    args.gpuPairs = pv;
    args.gpuPairsCount = (unsigned)(n < GS_PARK_MAX_PAIRS ? n : GS_PARK_MAX_PAIRS);
    return result(a, "cuCheckpointProcessRestore (onto another GPU)",
                  ((int (*)(int, restore_args_t *))a->restore)(pid, &args), err, errlen);
}

int gs_park_cuda_unlock(gs_park_cuda_t *a, int pid, char *err, size_t errlen)
{
    return result(a, "cuCheckpointProcessUnlock", a->unlock(pid, NULL), err, errlen);
}

int gs_park_cuda_state(gs_park_cuda_t *a, int pid, int *state, char *err, size_t errlen)
{
    return result(a, "cuCheckpointProcessGetState", a->state(pid, state), err, errlen);
}
