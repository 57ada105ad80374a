/*
 * sim_context.c - contexts: the per-device primary contexts, created
 * contexts, and each thread's context stack (thread-local).  A context owns
 * its default stream (NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD all
 * name it) and the streams created while it was current.
 */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

#define SIM_CTX_STACK 64

static __thread struct sim_ctx *t_stack[SIM_CTX_STACK];
static __thread int t_depth;

struct sim_ctx *sim_ctx_current(void)
{
    return t_depth ? t_stack[t_depth - 1] : NULL;
}

int sim_ctx_valid_locked(const struct sim_ctx *c)
{
    return c && sim_hmap_get(&sim_g.handles, (uintptr_t)c, SIM_H_CTX) == c && !c->destroyed;
}

CUresult sim_ctx_get(struct sim_ctx **out)
{
    struct sim_ctx *c = sim_ctx_current();
    if (!sim_ctx_valid_locked(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

struct sim_ctx *sim_ctx_new_locked(int dev, unsigned flags, int primary)
{
    struct sim_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->dev = dev;
    c->flags = flags;
    c->is_primary = primary;
    c->active = 1;
    c->default_stream = sim_stream_new_locked(c, 0, 0, 1);
    if (!c->default_stream || sim_hmap_put(&sim_g.handles, (uintptr_t)c, SIM_H_CTX, c) != 0) {
        if (c->default_stream)
            sim_stream_destroy_locked(c->default_stream);
        free(c);
        return NULL;
    }
    c->next = sim_g.ctxs;
    sim_g.ctxs = c;
    return c;
}

static CUresult set_current(struct sim_ctx *c)
{
    if (c == NULL) {
        if (t_depth)
            t_depth--;
        return CUDA_SUCCESS;
    }
    if (t_depth == 0)
        t_stack[t_depth++] = c;
    else
        t_stack[t_depth - 1] = c;
    return CUDA_SUCCESS;
}

static CUresult push_current(struct sim_ctx *c)
{
    if (t_depth == SIM_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    t_stack[t_depth++] = c;
    return CUDA_SUCCESS;
}

/* ---- the memory a context takes ----------------------------------------- */

/* A real context takes device memory of its own (about 0.5 GiB on an
 * H100), so that creating one on a full GPU fails with out of memory:
 * GPUSHARE_SIM_CONTEXT_MEMORY bytes, counted against the device from its
 * creation (a primary context: while retained) to its end.  A checkpoint
 * leaves it counted (the simulator moves allocations only). */
static CUresult charge_locked(struct sim_ctx *c)
{
    uint64_t bytes = sim_g.cfg.context_memory;
    if (!bytes || c->charged)
        return CUDA_SUCCESS;
    CUresult rc = sim_capacity_reserve(c->dev, bytes);
    if (rc == CUDA_SUCCESS)
        c->charged = bytes;
    return rc;
}

static void uncharge_locked(struct sim_ctx *c)
{
    if (c && c->charged) {
        sim_capacity_release(c->dev, c->charged);
        c->charged = 0;
    }
}

/* ---- primary contexts ------------------------------------------------- */

static CUresult primary_retain(CUcontext *pctx, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    struct sim_ctx *c = sim_g.primary[dev];
    if (!c)
        c = sim_g.primary[dev] = sim_ctx_new_locked(dev, 0, 1);
    /* its memory: at the first retain, and again after a release to 0 */
    CUresult rc = !c ? CUDA_ERROR_OUT_OF_MEMORY : charge_locked(c);
    if (rc == CUDA_SUCCESS) {
        c->retain++;
        c->active = 1;
        *pctx = (CUcontext)c;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    SIM_GATED(primary_retain(pctx, dev));
}

static CUresult primary_release(CUdevice dev)
{
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    struct sim_ctx *c = sim_g.primary[dev];
    if (!c || c->retain == 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else if (--c->retain == 0) {
        /* the simulator keeps the context's resources; it just goes
         * inactive (its own memory goes, as the real one's does) */
        c->active = 0;
        uncharge_locked(c);
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    SIM_GATED(primary_release(dev));
}

SIM_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    SIM_GATED(primary_release(dev));
}

static CUresult primary_reset(CUdevice dev)
{
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    struct sim_ctx *c = sim_g.primary[dev];
    if (c) {
        (void)sim_ctx_sync_locked(c);
        c->retain = 0;
        c->active = 0;
        c->flags = 0;
        uncharge_locked(c);
    }
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    SIM_GATED(primary_reset(dev));
}

SIM_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    SIM_GATED(primary_reset(dev));
}

static CUresult primary_state(CUdevice dev, unsigned int *flags, int *active)
{
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    struct sim_ctx *c = sim_g.primary[dev];
    *flags = c ? c->flags : 0;
    *active = c ? c->active && c->retain > 0 : 0;
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    SIM_GATED(primary_state(dev, flags, active));
}

static CUresult primary_set_flags(CUdevice dev, unsigned int flags)
{
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (flags & ~(0x07u | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_COREDUMP_ENABLE |
                  CU_CTX_USER_COREDUMP_ENABLE | CU_CTX_SYNC_MEMOPS))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    struct sim_ctx *c = sim_g.primary[dev];
    if (!c) {
        c = sim_ctx_new_locked(dev, 0, 1);
        sim_g.primary[dev] = c;
        if (c)
            c->active = 0;
    }
    if (c)
        c->flags = flags;
    else
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    SIM_GATED(primary_set_flags(dev, flags));
}

SIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    SIM_GATED(primary_set_flags(dev, flags));
}

/* ---- created contexts ------------------------------------------------- */

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    /* its memory first: on a full device nothing is created */
    uint64_t bytes = sim_g.cfg.context_memory;
    CUresult rc = bytes ? sim_capacity_reserve(dev, bytes) : CUDA_SUCCESS;
    struct sim_ctx *c = rc == CUDA_SUCCESS ? sim_ctx_new_locked(dev, flags, 0) : NULL;
    if (c) {
        c->charged = bytes;
        rc = push_current(c);
    } else if (rc == CUDA_SUCCESS) {
        if (bytes)
            sim_capacity_release(dev, bytes);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (c && rc == CUDA_SUCCESS)
        *pctx = (CUcontext)c;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    SIM_GATED(ctx_create(pctx, flags, dev));
}

SIM_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    SIM_GATED(ctx_create(pctx, flags, dev));
}

SIM_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                   unsigned int flags, CUdevice dev)
{
    SIM_NEED_INIT();
    if (numParams < 0 || (numParams > 0 && !paramsArray))
        return CUDA_ERROR_INVALID_VALUE;
    SIM_GATED(ctx_create(pctx, flags, dev)); /* execution affinity is ignored */
}

SIM_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                   unsigned int flags, CUdevice dev)
{
    SIM_NEED_INIT();
    if (ctxCreateParams && ctxCreateParams->cigParams)
        return CUDA_ERROR_NOT_SUPPORTED; /* CUDA in graphics: not simulated */
    SIM_GATED(ctx_create(pctx, flags, dev));
}

static void remove_from_stack(struct sim_ctx *c)
{
    int o = 0;
    for (int i = 0; i < t_depth; i++)
        if (t_stack[i] != c)
            t_stack[o++] = t_stack[i];
    t_depth = o;
}

static CUresult ctx_destroy(CUcontext ctx)
{
    struct sim_ctx *c = (struct sim_ctx *)ctx;
    sim_lock();
    if (!sim_ctx_valid_locked(c) || c->is_primary) {
        sim_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    for (struct sim_stream *s = c->streams; s; s = s->next)
        if (s->capture)
            sim_capture_invalidate_locked(s->capture);
    (void)sim_ctx_sync_locked(c);
    while (c->streams)
        sim_stream_destroy_locked(c->streams);
    sim_stream_destroy_locked(c->default_stream);
    c->default_stream = NULL;
    sim_mem_free_ctx_locked(c);
    uncharge_locked(c);
    sim_hmap_del(&sim_g.handles, (uintptr_t)c, SIM_H_CTX);
    c->destroyed = 1; /* stays on sim_g.ctxs: workers may still name it */
    remove_from_stack(c);
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    SIM_GATED(ctx_destroy(ctx));
}

SIM_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    SIM_GATED(ctx_destroy(ctx));
}

static CUresult ctx_set_current(CUcontext ctx)
{
    struct sim_ctx *c = (struct sim_ctx *)ctx;
    sim_lock();
    CUresult rc = (c && !sim_ctx_valid_locked(c)) ? CUDA_ERROR_INVALID_CONTEXT : set_current(c);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    SIM_GATED(ctx_set_current(ctx));
}

static CUresult ctx_get_current(CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)sim_ctx_current();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    SIM_GATED(ctx_get_current(pctx));
}

static CUresult ctx_push(CUcontext ctx)
{
    struct sim_ctx *c = (struct sim_ctx *)ctx;
    sim_lock();
    CUresult rc = sim_ctx_valid_locked(c) ? push_current(c) : CUDA_ERROR_INVALID_CONTEXT;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    SIM_GATED(ctx_push(ctx));
}

SIM_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx)
{
    SIM_GATED(ctx_push(ctx));
}

static CUresult ctx_pop(CUcontext *pctx)
{
    if (t_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct sim_ctx *c = t_stack[--t_depth];
    if (pctx)
        *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    SIM_GATED(ctx_pop(pctx));
}

SIM_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    SIM_GATED(ctx_pop(pctx));
}

/* ctx NULL: the current context. */
static CUresult ctx_device(CUdevice *device, CUcontext ctx)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ctx *c = (struct sim_ctx *)ctx;
    CUresult rc = CUDA_SUCCESS;
    if (!c)
        rc = sim_ctx_get(&c);
    else if (!sim_ctx_valid_locked(c))
        rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS)
        *device = c->dev;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    SIM_GATED(ctx_device(device, NULL));
}

SIM_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    SIM_GATED(ctx_device(device, ctx));
}

static CUresult ctx_sync(CUcontext ctx)
{
    sim_lock();
    struct sim_ctx *c = (struct sim_ctx *)ctx;
    CUresult rc = CUDA_SUCCESS;
    if (!c)
        rc = sim_ctx_get(&c);
    else if (!sim_ctx_valid_locked(c))
        rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS)
        rc = sim_ctx_sync_locked(c);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuCtxSynchronize(void)
{
    SIM_GATED(ctx_sync(NULL));
}

SIM_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    SIM_GATED(ctx_sync(ctx));
}

static CUresult ctx_flags(unsigned int *flags)
{
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ctx *c;
    CUresult rc = sim_ctx_get(&c);
    if (rc == CUDA_SUCCESS)
        *flags = c->flags;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
    SIM_GATED(ctx_flags(flags));
}

static CUresult ctx_priority_range(int *leastPriority, int *greatestPriority)
{
    sim_lock();
    struct sim_ctx *c;
    CUresult rc = sim_ctx_get(&c);
    sim_unlock();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    SIM_GATED(ctx_priority_range(leastPriority, greatestPriority));
}

static CUresult ctx_api_version(CUcontext ctx, unsigned int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ctx *c = (struct sim_ctx *)ctx;
    CUresult rc = CUDA_SUCCESS;
    if (!c)
        rc = sim_ctx_get(&c);
    else if (!sim_ctx_valid_locked(c))
        rc = CUDA_ERROR_INVALID_CONTEXT;
    sim_unlock();
    if (rc == CUDA_SUCCESS)
        *version = 3020;
    return rc;
}

SIM_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    SIM_GATED(ctx_api_version(ctx, version));
}
