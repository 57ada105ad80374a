/*
 * restore_cuda.c - the driver's checkpoint API for gpushare-restore (see
 * restore_cuda.h).  The calls pass NULL for their argument structs: all
 * their fields are reserved (zero) for a restore in place and an unlock.
 */
#include "restore_cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*init_fn)(unsigned);
typedef int (*state_fn)(int, int *);
typedef int (*step_fn)(int, void *);
typedef int (*errname_fn)(int, const char **);

static struct {
    state_fn state;
    step_fn restore, unlock;
    errname_fn errname;
} drv;

static int do_state(void *ctx, int pid, int *st)
{
    (void)ctx;
    return drv.state(pid, st);
}

static int do_restore(void *ctx, int pid)
{
    (void)ctx;
    return drv.restore(pid, NULL);
}

static int do_unlock(void *ctx, int pid)
{
    (void)ctx;
    return drv.unlock(pid, NULL);
}

static const char *error_name(void *ctx, int rc, char *buf, size_t len)
{
    (void)ctx;
    const char *name = NULL;
    if (drv.errname && drv.errname(rc, &name) == 0 && name)
        return name;
    snprintf(buf, len, "CUDA error %d", rc);
    return buf;
}

int gs_restore_cuda_load(gs_restore_ops_t *ops, char *why, size_t whylen)
{
    const char *path = getenv("GPUSHARE_LIBCUDA");
    if (!path || !*path)
        path = "libcuda.so.1";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, whylen, "cannot load the NVIDIA driver (%s): %s", path, dlerror());
        return -1;
    }
    init_fn init = (init_fn)dlsym(lib, "cuInit");
    drv.state = (state_fn)dlsym(lib, "cuCheckpointProcessGetState");
    drv.restore = (step_fn)dlsym(lib, "cuCheckpointProcessRestore");
    drv.unlock = (step_fn)dlsym(lib, "cuCheckpointProcessUnlock");
    drv.errname = (errname_fn)dlsym(lib, "cuGetErrorName");
    if (!init) {
        snprintf(why, whylen, "%s has no cuInit: not a CUDA driver", path);
        return -1;
    }
    if (!drv.state || !drv.restore || !drv.unlock) {
        snprintf(why, whylen,
                 "%s has no checkpoint API (cuCheckpointProcessGetState, Restore, Unlock: "
                 "driver 570 or newer)",
                 path);
        return 1;
    }
    int rc = init(0);
    if (rc != 0) {
        char buf[64];
        snprintf(why, whylen, "cuInit: %s", error_name(NULL, rc, buf, sizeof buf));
        return -1;
    }
    ops->state = do_state;
    ops->restore = do_restore;
    ops->unlock = do_unlock;
    ops->error_name = error_name;
    return 0;
}
