/*
 * hook_swap.c - the swap tier's glue in the hook (hook_swap.h): the engine
 * built on the real driver's functions and the backing rule; the swap
 * thread that carries out the broker's commands is hook_swap_thread.c's.
 */
#define _GNU_SOURCE
#include "hook_cuda.h" /* first: it sets how cuda.h declares the ABI */
#include "hook_real.h"

#include "gpushare_hook.h"
#include "hook_swap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hook_config.h"
#include "log.h"
#include "swap_engine.h"

#define MAX_DEVS 64 /* the engine's (peer masks are 64 bits) */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int enabled;
static gs_swap_driver_t drv;
static gs_swap_ranges_t *ranges;
static gs_swap_engine_t *engine;
static size_t granularity = 2u << 20;

static void init_once(void)
{
    void *lib = hook_real_libcuda();
    hook_dlsym_fn lookup = hook_real_dlsym();
    char why[200];
    if (!lib || !lookup || gs_swap_driver_resolve(&drv, lib, lookup, why, sizeof why) != 0) {
        gs_debug("swap tier off: %s", lib ? why : "no driver");
        return;
    }
    ranges = gs_swap_ranges_new();
    struct hook_swap_settings set;
    hook_config_swap_read(&set);
    gs_swap_engine_config_t cfg = {.streams = set.streams};
    /* The unit of a move (GS_SWAP_SEGMENT_DEFAULT, 256 MiB): a switch's
     * two sides hand memory to each other segment by segment, so a test
     * with a small GPU and small chunks needs small segments too. */
    if (set.seg_mib)
        cfg.seg_bytes = cfg.batch_bytes = (size_t)set.seg_mib << 20;
    engine = ranges ? gs_swap_engine_new(&drv, ranges, &cfg) : NULL;
    /* The engine also maps what other processes share with this one (IPC);
     * backing this process' own allocations is what GPUSHARE_SWAP=off
     * turns off (hook_swap.h). */
    enabled = engine != NULL && !set.backing_off;
}

gs_swap_engine_t *hook_swap_engine(void)
{
    pthread_once(&once, init_once);
    return engine;
}

const gs_swap_driver_t *hook_swap_driver(void)
{
    return &drv;
}

gs_swap_ranges_t *hook_swap_ranges(void)
{
    return ranges;
}

static int ready(void)
{
    pthread_once(&once, init_once);
    return __atomic_load_n(&enabled, __ATOMIC_RELAXED);
}

HOOK_EXPORT int gpushare_hook_swap_backing(int on)
{
    if (!hook_swap_engine())
        return -1;
    int was = __atomic_exchange_n(&enabled, on ? 1 : 0, __ATOMIC_SEQ_CST);
    return was;
}

int hook_swap_available(void)
{
    return ready();
}

size_t hook_swap_segment_bytes(void)
{
    return ready() ? gs_swap_engine_segment_bytes(engine) : 0;
}

/* Backed when the granularity wastes at most an eighth of the size. */
static int worth_backing(size_t size)
{
    size_t rounded = (size + granularity - 1) / granularity * granularity;
    return size > 0 && (rounded - size) * 8 <= size;
}

int hook_swap_alloc(CUcontext ctx, int dev, size_t size, CUdeviceptr *dptr, CUresult *r)
{
    if (!ready() || !worth_backing(size) || dev < 0 || dev >= MAX_DEVS || !dptr)
        return 0;
    *r = gs_swap_alloc(engine, ctx, dev, size, dptr);
    return 1;
}

int hook_swap_free(CUdeviceptr p, CUresult *r)
{
    if (!p || !hook_swap_engine())
        return 0;
    int ours = 0;
    *r = gs_swap_free(engine, p, &ours);
    return ours;
}

int hook_swap_range(CUdeviceptr p, CUdeviceptr *base, size_t *size)
{
    gs_swap_range_t rg;
    if (!hook_swap_engine() || !gs_swap_ranges_find(ranges, p, &rg) || p - rg.va >= rg.size ||
        rg.vmm)
        return 0; /* past the size asked for: the driver's padding, as for cuMemAlloc; the
                     program's own mappings are the driver's to describe */
    if (base)
        *base = rg.va;
    if (size)
        *size = rg.size;
    return 1;
}

void hook_swap_vmm_created(CUmemGenericAllocationHandle *handle, size_t size, int dev)
{
    if (ready())
        gs_swap_vmm_created(engine, handle, size, dev);
}

void hook_swap_peer(int owner, int accessor)
{
    if (ready() && gs_swap_grant_peer(engine, owner, accessor) != CUDA_SUCCESS)
        gs_warn("could not give GPU %d access to GPU %d's memory", accessor, owner);
}

void hook_swap_forget_ctx(CUcontext ctx)
{
    if (engine) /* never initialise the tier just to forget nothing */
        gs_swap_forget_ctx(engine, ctx);
}

void hook_swap_atfork_child(void)
{
    /* The parent's ranges do not exist here; the objects are dropped
     * without driver calls (the parent owns them).  The swap thread's
     * windows and queue are its own to forget (hook_mem_atfork_child). */
    if (engine) {
        ranges = gs_swap_ranges_new();
        gs_swap_engine_config_t cfg = {.streams = 4};
        engine = ranges ? gs_swap_engine_new(&drv, ranges, &cfg) : NULL;
        enabled = enabled && engine != NULL;
    }
}

void hook_swap_totals(int dev, uint64_t *resident, uint64_t *parked)
{
    *resident = *parked = 0;
    if (ready())
        gs_swap_ranges_totals(ranges, dev, resident, parked);
}
