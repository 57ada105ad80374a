/*
 * hook_real.c - finding the real driver.
 *
 * The real dlsym comes from dlvsym(RTLD_NEXT, "dlsym", <version>): the hook
 * exports its own dlsym, and glibc-private entry points (__libc_dlsym,
 * _dl_sym) are never used, so this keeps working across glibc releases.
 * The real libcuda is the one already loaded (dlopen RTLD_NOLOAD) or else
 * loaded here; GPUSHARE_LIBCUDA names another file.  Every table entry's real
 * address is looked up once, through the real dlsym on that handle: it is
 * both what the wrappers call and what hook_resolve.c compares
 * cuGetProcAddress results with.
 */
#define _GNU_SOURCE
#include "hook_real.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include "hook_config.h"
#include "log.h"

void *hook_real[HOOK_N];
struct hook_cuda hook_cu;

static _Atomic(hook_dlsym_fn) real_dlsym_fn;
static void *libcuda_handle;

HOOK_NO_SANITIZE hook_dlsym_fn hook_real_dlsym(void)
{
    hook_dlsym_fn f = atomic_load_explicit(&real_dlsym_fn, memory_order_acquire);
    if (f)
        return f;
    /* glibc >= 2.34 moved dlsym into libc as dlsym@@GLIBC_2.34; older ones
     * (and the compat symbol) are GLIBC_2.2.5 on x86-64, GLIBC_2.17 on
     * aarch64. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; !f && i < sizeof versions / sizeof versions[0]; i++)
        f = (hook_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (!f) {
        /* Nothing sensible is left: a process without dlsym cannot resolve
         * anything.  Say so once; callers get NULL. */
        static const char msg[] = "gpushare-hook: cannot find the real dlsym\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        return NULL;
    }
    atomic_store_explicit(&real_dlsym_fn, f, memory_order_release);
    return f;
}

/* Callers initialise the hook first (hook_init). */
void *hook_real_libcuda(void)
{
    return libcuda_handle;
}

void *hook_real_get(int idx)
{
    void *p = hook_real[idx];
    if (__builtin_expect(p != NULL, 1))
        return p;
    /* Not loaded yet (a call re-entering during initialisation) or missing
     * from this libcuda: one uncached lookup. */
    hook_dlsym_fn dl = hook_real_dlsym();
    void *h = libcuda_handle;
    return dl && h ? dl(h, hook_table[idx].abi) : NULL;
}

#define AUX(field, name) hook_cu.field = (__typeof__(hook_cu.field))dl(h, #name)

void hook_real_load(void)
{
    hook_dlsym_fn dl = hook_real_dlsym();
    const char *name = hook_cfg.libcuda; /* hook_init reads it first */
    void *h = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen(name, RTLD_NOW);
    if (!h || !dl) {
        const char *e = dlerror();
        gs_warn("cannot load the CUDA driver %s (%s); CUDA calls will fail", name,
                e ? e : "no dlsym");
        return;
    }
    libcuda_handle = h;
    for (int i = 0; i < HOOK_N; i++)
        hook_real[i] = dl(h, hook_table[i].abi);
    AUX(init, cuInit);
    AUX(ctxGetCurrent, cuCtxGetCurrent);
    AUX(ctxSetCurrent, cuCtxSetCurrent);
    AUX(ctxGetDevice, cuCtxGetDevice);
    AUX(ctxGetDeviceOf, cuCtxGetDevice_v2);
    AUX(ctxPush, cuCtxPushCurrent_v2);
    AUX(ctxPop, cuCtxPopCurrent_v2);
    AUX(streamGetCtx, cuStreamGetCtx);
    AUX(streamGetCtx2, cuStreamGetCtx_v2);
    AUX(streamGetDevice, cuStreamGetDevice);
    AUX(streamIsCapturing, cuStreamIsCapturing);
    AUX(eventCreate, cuEventCreate);
    AUX(eventRecord, cuEventRecord);
    AUX(eventSynchronize, cuEventSynchronize);
    AUX(eventQuery, cuEventQuery);
    AUX(eventDestroy, cuEventDestroy_v2);
    AUX(deviceGetCount, cuDeviceGetCount);
    AUX(deviceGet, cuDeviceGet);
    AUX(deviceGetUuid2, cuDeviceGetUuid_v2);
    AUX(deviceGetUuid, cuDeviceGetUuid);
    AUX(primaryCtxGetState, cuDevicePrimaryCtxGetState);
    AUX(streamCreate, cuStreamCreate);
    AUX(eventElapsed, cuEventElapsedTime_v2);
    if (!hook_cu.eventElapsed)
        AUX(eventElapsed, cuEventElapsedTime);
}
