/*
 * hook_cuctx.c - which GPU a stream or context belongs to, and what the GPUs
 * are called.
 *
 * The submission path and the drains need the device of the stream a
 * submission goes to.  Contexts are remembered when the program creates or retains them
 * (hook_ctx.c), so most lookups need no driver call; otherwise the real
 * driver is asked (cuStreamGetDevice, cuCtxGetDevice_v2, or a push/pop of the
 * context on this thread as the last resort).  Devices are named to the
 * broker by UUID (cuDeviceGetUuid_v2), read once the driver is initialised.
 */
#include "hook_cuctx.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "hook_gate.h"
#include "hook_real.h"
#include "hook_thread.h"

#define CTX_MAX 256

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUcontext ctx;
    int dev;
    int primary;
} ctxs[CTX_MAX];
static _Atomic int enumerated;

void hook_cuctx_note(CUcontext ctx, int dev, int primary)
{
    if (!ctx)
        return;
    pthread_mutex_lock(&ctx_mu);
    int free_slot = -1;
    for (int i = 0; i < CTX_MAX; i++) {
        if (ctxs[i].ctx == ctx) {
            ctxs[i].dev = dev;
            ctxs[i].primary = primary;
            pthread_mutex_unlock(&ctx_mu);
            return;
        }
        if (!ctxs[i].ctx && free_slot < 0)
            free_slot = i;
    }
    if (free_slot >= 0) {
        ctxs[free_slot].ctx = ctx;
        ctxs[free_slot].dev = dev;
        ctxs[free_slot].primary = primary;
    }
    pthread_mutex_unlock(&ctx_mu);
}

int hook_cuctx_device(CUcontext ctx)
{
    int dev = -1;
    pthread_mutex_lock(&ctx_mu);
    for (int i = 0; i < CTX_MAX; i++)
        if (ctx && ctxs[i].ctx == ctx) {
            dev = ctxs[i].dev;
            break;
        }
    pthread_mutex_unlock(&ctx_mu);
    return dev;
}

CUcontext hook_cuctx_primary(int dev)
{
    CUcontext c = NULL;
    pthread_mutex_lock(&ctx_mu);
    for (int i = 0; i < CTX_MAX; i++)
        if (ctxs[i].ctx && ctxs[i].primary && ctxs[i].dev == dev) {
            c = ctxs[i].ctx;
            break;
        }
    pthread_mutex_unlock(&ctx_mu);
    return c;
}

void hook_cuctx_forget(CUcontext ctx)
{
    pthread_mutex_lock(&ctx_mu);
    for (int i = 0; i < CTX_MAX; i++)
        if (ctxs[i].ctx == ctx)
            ctxs[i].ctx = NULL;
    pthread_mutex_unlock(&ctx_mu);
}

/* Device of ctx: remembered, else asked. */
static int ctx_device(CUcontext ctx, int ctx_is_current)
{
    int dev = hook_cuctx_device(ctx);
    if (dev >= 0)
        return dev;
    CUdevice d;
    if (ctx_is_current && hook_cu.ctxGetDevice && hook_cu.ctxGetDevice(&d) == CUDA_SUCCESS)
        return (int)d;
    if (hook_cu.ctxGetDeviceOf && hook_cu.ctxGetDeviceOf(&d, ctx) == CUDA_SUCCESS)
        return (int)d;
    if (hook_cu.ctxPush && hook_cu.ctxPop && hook_cu.ctxGetDevice &&
        hook_cu.ctxPush(ctx) == CUDA_SUCCESS) {
        CUresult r = hook_cu.ctxGetDevice(&d);
        CUcontext popped;
        hook_cu.ctxPop(&popped);
        if (r == CUDA_SUCCESS)
            return (int)d;
    }
    return -1;
}

int hook_cuctx_stream_where(CUstream s, CUcontext *ctx, int *dev)
{
    *ctx = NULL;
    *dev = -1;
    if (hook_cuda_stream_implicit(s)) {
        if (!hook_cu.ctxGetCurrent || hook_cu.ctxGetCurrent(ctx) != CUDA_SUCCESS || !*ctx)
            return -1;
        *dev = ctx_device(*ctx, 1);
        return *dev >= 0 ? 0 : -1;
    }
    if (!hook_cu.streamGetCtx || hook_cu.streamGetCtx(s, ctx) != CUDA_SUCCESS || !*ctx)
        return -1;
    CUdevice d;
    if (hook_cu.streamGetDevice && hook_cu.streamGetDevice(s, &d) == CUDA_SUCCESS)
        *dev = (int)d;
    else
        *dev = ctx_device(*ctx, 0);
    return *dev >= 0 ? 0 : -1;
}

int hook_cuctx_stream_capturing(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!hook_cu.streamIsCapturing || hook_cu.streamIsCapturing(s, &st) != CUDA_SUCCESS)
        return 0;
    return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

static void format_uuid(char *out, size_t len, const CUuuid *u)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

void hook_cuctx_enumerate(void)
{
    if (atomic_load_explicit(&enumerated, memory_order_acquire))
        return;
    struct hook_thr *t = hook_thread_self();
    t->nest++;
    int n = 0;
    char uuids[HOOK_MAX_DEVICES][HOOK_UUID_LEN];
    if (hook_cu.deviceGetCount && hook_cu.deviceGetCount(&n) == CUDA_SUCCESS) {
        if (n > HOOK_MAX_DEVICES)
            n = HOOK_MAX_DEVICES;
        for (int i = 0; i < n; i++) {
            CUdevice d;
            CUuuid u;
            CUresult r = hook_cu.deviceGet ? hook_cu.deviceGet(&d, i) : CUDA_ERROR_NOT_FOUND;
            if (r == CUDA_SUCCESS)
                r = hook_cu.deviceGetUuid2  ? hook_cu.deviceGetUuid2(&u, d)
                    : hook_cu.deviceGetUuid ? hook_cu.deviceGetUuid(&u, d)
                                            : CUDA_ERROR_NOT_FOUND;
            if (r == CUDA_SUCCESS)
                format_uuid(uuids[i], sizeof uuids[i], &u);
            else
                snprintf(uuids[i], sizeof uuids[i], "GPU-unknown-%d", i);
        }
    } else
        n = -1;
    t->nest--;
    if (n < 0)
        return; /* driver not initialised yet: ask again at the next touch */
    pthread_mutex_lock(&hook_gate_mu);
    if (!hook_gate_st.enumerated) {
        for (int i = 0; i < n; i++)
            memcpy(hook_gate_st.dev[i].uuid, uuids[i], HOOK_UUID_LEN);
        hook_gate_st.ndev = n;
        hook_gate_st.enumerated = 1;
    }
    pthread_mutex_unlock(&hook_gate_mu);
    atomic_store_explicit(&enumerated, 1, memory_order_release);
}

void hook_cuctx_atfork_prepare(void)
{
    pthread_mutex_lock(&ctx_mu);
}

void hook_cuctx_atfork_parent(void)
{
    pthread_mutex_unlock(&ctx_mu);
}

void hook_cuctx_atfork_child(void)
{
    pthread_mutex_init(&ctx_mu, NULL);
    memset(ctxs, 0, sizeof ctxs);
    atomic_store(&enumerated, 0);
}
