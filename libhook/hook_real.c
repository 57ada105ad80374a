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
#include "hook_internal.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define HOOK_CLASS_SUBMIT  HOOK_SUBMIT
#define HOOK_CLASS_SYNC    HOOK_SYNC
#define HOOK_CLASS_ALLOC   HOOK_ALLOC
#define HOOK_CLASS_FREE    HOOK_FREE
#define HOOK_CLASS_RESOLVE HOOK_RESOLVE
#define HOOK_CLASS_OTHER   HOOK_OTHER
#define HOOK_PT_PT         1
#define HOOK_PT_LG         0

const struct hook_entry hook_table[HOOK_N] = {
#define HOOK_FN(cls, abi, base, pt, stream, params, args)                                          \
    {#abi, #base, HOOK_CLASS_##cls, HOOK_PT_##pt, (void *)&abi},
#include "hook_table.def"
};

void *hook_real[HOOK_N];
struct hook_cuda hook_cu;

static _Atomic(hook_dlsym_fn) real_dlsym_fn;
static void *libcuda_handle;
static int by_abi[HOOK_N], by_base[HOOK_N];

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

void *hook_real_libcuda(void)
{
    hook_init();
    return libcuda_handle;
}

static int cmp_abi(const void *a, const void *b)
{
    return strcmp(hook_table[*(const int *)a].abi, hook_table[*(const int *)b].abi);
}

static int cmp_base(const void *a, const void *b)
{
    int c = strcmp(hook_table[*(const int *)a].base, hook_table[*(const int *)b].base);
    return c ? c : *(const int *)a - *(const int *)b;
}

/* The sorted indices need no CUDA and no libcuda: built on first use. */
static void sort_once(void)
{
    for (int i = 0; i < HOOK_N; i++)
        by_abi[i] = by_base[i] = i;
    qsort(by_abi, HOOK_N, sizeof by_abi[0], cmp_abi);
    qsort(by_base, HOOK_N, sizeof by_base[0], cmp_base);
}
static pthread_once_t sort_once_ctl = PTHREAD_ONCE_INIT;

int hook_table_find_abi(const char *name)
{
    pthread_once(&sort_once_ctl, sort_once);
    size_t lo = 0, hi = HOOK_N;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(name, hook_table[by_abi[mid]].abi);
        if (c == 0)
            return by_abi[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

size_t hook_table_find_base(const char *base, size_t *first)
{
    pthread_once(&sort_once_ctl, sort_once);
    size_t lo = 0, hi = HOOK_N;
    while (lo < hi) { /* first entry >= base */
        size_t mid = (lo + hi) / 2;
        if (strcmp(hook_table[by_base[mid]].base, base) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t n = 0;
    while (lo + n < HOOK_N && strcmp(hook_table[by_base[lo + n]].base, base) == 0)
        n++;
    *first = lo;
    return n;
}

const int *hook_table_by_base(void)
{
    pthread_once(&sort_once_ctl, sort_once);
    return by_base;
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

uint64_t hook_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

#define AUX(field, name) hook_cu.field = (__typeof__(hook_cu.field))dl(h, #name)

void hook_real_load(void)
{
    hook_dlsym_fn dl = hook_real_dlsym();
    const char *name = getenv("GPUSHARE_LIBCUDA");
    if (!name || !*name)
        name = "libcuda.so.1";
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
