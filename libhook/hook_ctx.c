/*
 * hook_ctx.c - wrappers for the calls that create, switch and destroy
 * contexts and streams.
 *
 * Creating (or retaining) a context for a device is what "touches" the
 * device: from then on, submissions to it need a grant, so the gate word is
 * closed before the context is handed to the program and no submission can
 * slip through on a stale "all granted".  It is also when the broker
 * connection starts.  Switching the current context invalidates the
 * thread's stream cache (the default streams are per context).  Destroying
 * a stream or a context removes its streams from the drain's list, and a
 * context is not torn down while a drain is synchronising on it.
 *
 * A context takes GPU memory of its own, so creating one fails with out of
 * memory on a GPU that other notebooks fill, before this process has ever
 * talked to the broker: the new notebook's first CUDA call failed where the
 * broker could have parked an idle one (the H100 capacity run of
 * 2026-12-07, its `over` phase).  Such a creation touches the device first
 * (which connects), asks the broker for room for a context
 * (GPUSHARE_CONTEXT_ROOM) and is tried again.
 */
#include "hook_burst.h"
#include "hook_capture.h"
#include "hook_client.h"
#include "hook_config.h"
#include "hook_cuctx.h"
#include "hook_gate.h"
#include "hook_mem.h"
#include "hook_real.h"
#include "hook_streams.h"
#include "hook_wrap.h"
#include "log.h"

/* ---- creation: touch the device ----------------------------------------- */

/* Tries of a creation that ran out of memory: the room asked for is an
 * estimate, so a second context's worth may be needed. */
#define CONTEXT_ROOM_TRIES 2

/* A creation returned r: 1 when the broker made room for a context on dev
 * and it is worth trying again (*tries counts the tries). */
static int room_for_context(CUresult r, CUdevice dev, int *tries)
{
    if (r != CUDA_ERROR_OUT_OF_MEMORY || hook_cfg.disabled || (*tries)++ >= CONTEXT_ROOM_TRIES)
        return 0;
    hook_client_touch((int)dev); /* the broker hears of us from here on */
    char reason[256] = "";
    int ok = hook_client_make_room((int)dev, hook_cfg.context_room, hook_cfg.make_room_ms, reason,
                                   sizeof reason);
    if (ok)
        gs_debug("the broker made room for a context on GPU %d; trying again", (int)dev);
    else if (reason[0])
        gs_warn("out of GPU memory for a context on GPU %d: %s", (int)dev, reason);
    return ok;
}

/* r = call, once more each time the broker made room for it. */
#define WITH_CONTEXT_ROOM(dev, call)                                                               \
    do {                                                                                           \
        int tries_ = 0;                                                                            \
        do                                                                                         \
            call;                                                                                  \
        while (room_for_context(r, (dev), &tries_));                                               \
    } while (0)

static void created(CUresult r, CUcontext *pctx, CUdevice dev, int primary)
{
    if (r != CUDA_SUCCESS)
        return;
    hook_cuctx_note(pctx ? *pctx : NULL, (int)dev, primary);
    hook_client_touch((int)dev);
}

#define CTX_CREATE(abi, pctx, dev, args)                                                           \
    HOOK_WRAP_ENTER(abi, args);                                                                    \
    CUresult r;                                                                                    \
    WITH_CONTEXT_ROOM(dev, r = real_ args);                                                        \
    t_->ctx_gen++;                                                                                 \
    created(r, pctx, dev, 0);                                                                      \
    HOOK_WRAP_LEAVE(r)

HOOK_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CTX_CREATE(cuCtxCreate, pctx, dev, (pctx, flags, dev));
}

HOOK_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CTX_CREATE(cuCtxCreate_v2, pctx, dev, (pctx, flags, dev));
}

HOOK_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
                                    int numParams, unsigned int flags, CUdevice dev)
{
    CTX_CREATE(cuCtxCreate_v3, pctx, dev, (pctx, paramsArray, numParams, flags, dev));
}

HOOK_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                    unsigned int flags, CUdevice dev)
{
    CTX_CREATE(cuCtxCreate_v4, pctx, dev, (pctx, ctxCreateParams, flags, dev));
}

HOOK_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    HOOK_WRAP_ENTER(cuDevicePrimaryCtxRetain, (pctx, dev));
    CUresult r;
    WITH_CONTEXT_ROOM(dev, r = real_(pctx, dev));
    created(r, pctx, dev, 1);
    HOOK_WRAP_LEAVE(r);
}

HOOK_EXPORT CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev,
                                      unsigned int flags)
{
    HOOK_WRAP_ENTER(cuGreenCtxCreate, (phCtx, desc, dev, flags));
    CUresult r;
    WITH_CONTEXT_ROOM(dev, r = real_(phCtx, desc, dev, flags));
    created(r, NULL, dev, 0);
    HOOK_WRAP_LEAVE(r);
}

HOOK_EXPORT CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
    HOOK_WRAP_ENTER(cuCtxFromGreenCtx, (pContext, hCtx));
    CUresult r = real_(pContext, hCtx);
    if (r == CUDA_SUCCESS && pContext && *pContext) {
        CUdevice dev;
        if (hook_cu.ctxGetDeviceOf && hook_cu.ctxGetDeviceOf(&dev, *pContext) == CUDA_SUCCESS)
            hook_cuctx_note(*pContext, (int)dev, 0);
    }
    HOOK_WRAP_LEAVE(r);
}

/* ---- switching: the default streams change with the context ------------ */

#define CTX_SWITCH(abi, args)                                                                      \
    HOOK_WRAP_ENTER(abi, args);                                                                    \
    CUresult r = real_ args;                                                                       \
    t_->ctx_gen++;                                                                                 \
    HOOK_WRAP_LEAVE(r)

HOOK_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CTX_SWITCH(cuCtxSetCurrent, (ctx));
}

HOOK_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx)
{
    CTX_SWITCH(cuCtxPushCurrent, (ctx));
}

HOOK_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CTX_SWITCH(cuCtxPushCurrent_v2, (ctx));
}

HOOK_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    CTX_SWITCH(cuCtxPopCurrent, (pctx));
}

HOOK_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CTX_SWITCH(cuCtxPopCurrent_v2, (pctx));
}

/* ---- teardown ----------------------------------------------------------- */

/* Counted first, so that no drain or burst probe starts meanwhile; then
 * waits for those under way (a burst probe waits for its events, which
 * the teardown would have waited for anyway). */
static void teardown_begin(void)
{
    pthread_mutex_lock(&hook_gate_mu);
    hook_gate_st.ctx_destroying++;
    while (hook_gate_st.drain_syncing > 0 || hook_gate_st.monitor_busy > 0)
        pthread_cond_wait(&hook_gate_cv, &hook_gate_mu);
    pthread_mutex_unlock(&hook_gate_mu);
}

static void teardown_end(void)
{
    pthread_mutex_lock(&hook_gate_mu);
    hook_gate_st.ctx_destroying--;
    pthread_cond_broadcast(&hook_gate_cv);
    pthread_mutex_unlock(&hook_gate_mu);
}

/* Its streams, the burst monitor's events and its allocations went with
 * the context. */
static void ctx_gone(CUcontext ctx)
{
    hook_streams_forget_ctx(ctx);
    hook_burst_forget_ctx(ctx);
    hook_mem_forget_ctx(ctx);
}

#define CTX_DESTROY(abi, ctx)                                                                      \
    HOOK_WRAP_ENTER(abi, (ctx));                                                                   \
    teardown_begin();                                                                              \
    CUresult r = real_(ctx);                                                                       \
    if (r == CUDA_SUCCESS) {                                                                       \
        ctx_gone(ctx);                                                                             \
        hook_cuctx_forget(ctx);                                                                    \
    }                                                                                              \
    teardown_end();                                                                                \
    t_->ctx_gen++;                                                                                 \
    HOOK_WRAP_LEAVE(r)

HOOK_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    CTX_DESTROY(cuCtxDestroy, ctx);
}

HOOK_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    CTX_DESTROY(cuCtxDestroy_v2, ctx);
}

/* Release destroys the primary context only when its last reference goes;
 * Reset always does. */
static void primary_gone(CUresult r, CUdevice dev, int always)
{
    if (r != CUDA_SUCCESS)
        return;
    CUcontext c = hook_cuctx_primary((int)dev);
    if (!c)
        return;
    unsigned flags;
    int active = 0;
    if (!always && hook_cu.primaryCtxGetState &&
        hook_cu.primaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active)
        return;
    ctx_gone(c);
}

#define PRIMARY_DOWN(abi, always)                                                                  \
    HOOK_WRAP_ENTER(abi, (dev));                                                                   \
    teardown_begin();                                                                              \
    CUresult r = real_(dev);                                                                       \
    primary_gone(r, dev, always);                                                                  \
    teardown_end();                                                                                \
    HOOK_WRAP_LEAVE(r)

HOOK_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    PRIMARY_DOWN(cuDevicePrimaryCtxRelease, 0);
}

HOOK_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    PRIMARY_DOWN(cuDevicePrimaryCtxRelease_v2, 0);
}

HOOK_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    PRIMARY_DOWN(cuDevicePrimaryCtxReset, 1);
}

HOOK_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    PRIMARY_DOWN(cuDevicePrimaryCtxReset_v2, 1);
}

HOOK_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx hCtx)
{
    HOOK_WRAP_ENTER(cuGreenCtxDestroy, (hCtx));
    teardown_begin();
    CUresult r = real_(hCtx);
    if (r == CUDA_SUCCESS) {
        hook_streams_forget_green(hCtx);
        hook_burst_forget_ctx(NULL);
    }
    teardown_end();
    HOOK_WRAP_LEAVE(r);
}

/* A drain records events under hook_streams_mu; holding it across the
 * real call means a drain never records on a stream being destroyed. */
#define STREAM_DESTROY(abi)                                                                        \
    HOOK_WRAP_ENTER(abi, (hStream));                                                               \
    pthread_mutex_lock(&hook_streams_mu);                                                          \
    CUresult r = real_(hStream);                                                                   \
    if (r == CUDA_SUCCESS)                                                                         \
        hook_streams_forget_stream(hStream);                                                       \
    pthread_mutex_unlock(&hook_streams_mu);                                                        \
    if (r == CUDA_SUCCESS)                                                                         \
        hook_capture_forget_stream(hStream);                                                       \
    HOOK_WRAP_LEAVE(r)

HOOK_EXPORT CUresult cuStreamDestroy(CUstream hStream)
{
    STREAM_DESTROY(cuStreamDestroy);
}

HOOK_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    STREAM_DESTROY(cuStreamDestroy_v2);
}
