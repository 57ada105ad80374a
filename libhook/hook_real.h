/*
 * hook_real.h - the real driver: the real dlsym (never glibc-private
 * symbols), the real libcuda, its address of every table entry, and the
 * driver functions the hook calls itself.
 */
#ifndef GS_HOOK_REAL_H
#define GS_HOOK_REAL_H

#include "hook_cuda.h"
#include "hook_table.h"

#include <stdatomic.h>

/* The real libcuda's address of each entry (NULL: libcuda lacks it),
 * filled by hook_real_load(). */
extern void *hook_real[HOOK_N];

/* The real function of entry idx (NULL when libcuda lacks it); also before
 * hook_real_load() has run. */
void *hook_real_get(int idx);
#define HOOK_REAL_FN(abi) ((__typeof__(&abi))hook_real_get(HOOK_IDX_##abi))

typedef void *(*hook_dlsym_fn)(void *, const char *);
hook_dlsym_fn hook_real_dlsym(void);
void *hook_real_libcuda(void); /* handle, NULL when libcuda could not be loaded */
/* Loads libcuda (GPUSHARE_LIBCUDA, else libcuda.so.1) and every address
 * above; once, from hook_init. */
void hook_real_load(void);

/* Real driver functions the hook calls itself (NULL where libcuda lacks
 * one); never our wrappers. */
struct hook_cuda {
    __typeof__(&cuInit) init;
    __typeof__(&cuCtxGetCurrent) ctxGetCurrent;
    __typeof__(&cuCtxSetCurrent) ctxSetCurrent;
    __typeof__(&cuCtxGetDevice) ctxGetDevice;
    __typeof__(&cuCtxGetDevice_v2) ctxGetDeviceOf;
    __typeof__(&cuCtxPushCurrent_v2) ctxPush;
    __typeof__(&cuCtxPopCurrent_v2) ctxPop;
    __typeof__(&cuStreamGetCtx) streamGetCtx;
    __typeof__(&cuStreamGetCtx_v2) streamGetCtx2;
    __typeof__(&cuStreamGetDevice) streamGetDevice;
    __typeof__(&cuStreamIsCapturing) streamIsCapturing;
    __typeof__(&cuEventCreate) eventCreate;
    __typeof__(&cuEventRecord) eventRecord;
    __typeof__(&cuEventSynchronize) eventSynchronize;
    __typeof__(&cuEventQuery) eventQuery;
    __typeof__(&cuEventDestroy_v2) eventDestroy;
    __typeof__(&cuDeviceGetCount) deviceGetCount;
    __typeof__(&cuDeviceGet) deviceGet;
    __typeof__(&cuDeviceGetUuid_v2) deviceGetUuid2;
    __typeof__(&cuDeviceGetUuid) deviceGetUuid;
    __typeof__(&cuDevicePrimaryCtxGetState) primaryCtxGetState;
    __typeof__(&cuStreamCreate) streamCreate;
    __typeof__(&cuEventElapsedTime_v2) eventElapsed;
};
extern struct hook_cuda hook_cu;

#endif
