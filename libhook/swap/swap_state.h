/*
 * swap_state.h - the swap engine's state and insides, shared by its files:
 * swap_engine.c (the tier's own allocations, sharing them), swap_move.c
 * (the moves) and swap_vmm.c (the program's own virtual-memory mappings,
 * adopted so that they move too), all three over swap_segs.c.  Not for use outside libhook/swap/.
 */
#ifndef GS_SWAP_STATE_H
#define GS_SWAP_STATE_H

#include <pthread.h>

#include "swap_engine.h"
#include "swap_names.h"

#define MAX_LANES   8 /* contexts with swap streams */
#define MAX_STREAMS 16
#define MAX_DEVS    64 /* peer masks are 64 bits */

struct lane { /* the streams and events of one context */
    CUcontext ctx;
    CUstream s[MAX_STREAMS];
    CUevent ev[2][MAX_STREAMS];
};

struct imported { /* another process' range, mapped here */
    CUdeviceptr va;
    size_t bytes, seg_bytes;
    int nseg;
    struct imported *next;
};

struct gs_swap_engine {
    gs_swap_names_t *names; /* the program's handles (swap_names.h) */
    const gs_swap_driver_t *d;
    gs_swap_ranges_t *ranges;
    gs_swap_engine_config_t cfg;
    pthread_mutex_t op; /* one allocation, free or move at a time */
    size_t gran[MAX_DEVS];
    int shareable[MAX_DEVS];  /* 0 unknown, 1 descriptors can be exported, -1 not */
    struct imported *imports; /* ranges of other processes mapped here (IPC) */
    uint64_t peers[MAX_DEVS]; /* bit a of peers[o]: GPU a reaches GPU o's ranges */
    struct lane lanes[MAX_LANES];
    int nlanes;
};

/* ---- swap_segs.c: the building blocks below the engine's files -------- */

/* CLOCK_MONOTONIC in ns. */
int64_t gs_swap_now_ns(void);
/* The driver's name for r (never NULL). */
const char *gs_swap_errname(const gs_swap_engine_t *e, CUresult r);

/* Segment k of r: where it starts in the range and how long it is. */
static inline size_t gs_swap_seg_off(const gs_swap_range_t *r, int k)
{
    return (size_t)k * r->seg_bytes;
}

static inline size_t gs_swap_seg_len(const gs_swap_range_t *r, int k)
{
    size_t off = gs_swap_seg_off(r, k);
    return r->bytes - off < r->seg_bytes ? r->bytes - off : r->seg_bytes;
}

/* Device memory as the tier makes it on GPU dev (exportable where the GPU
 * allows it), and the access list of ranges there (the GPU and its peers):
 * how many entries of a. */
CUmemAllocationProp gs_swap_device_prop(gs_swap_engine_t *e, int dev);
size_t gs_swap_access_list(const gs_swap_engine_t *e, int dev, CUmemAccessDesc *a);

/* Physical memory for segment k of r, mapped at its address with its
 * access (op held). */
CUresult gs_swap_seg_back(gs_swap_engine_t *e, gs_swap_range_t *r, int k);
/* Segment k of r unmapped and its memory released (op held). */
CUresult gs_swap_seg_unback(gs_swap_engine_t *e, gs_swap_range_t *r, int k);

/* The streams and events that moving memory of ctx needs, made now (ctx
 * current, op held): a swap out must not need device memory, and a GPU
 * that the program filled to the last page has none to give then (seen
 * with PyTorch's expandable segments on the H200).  A failure is retried
 * by the move itself. */
void gs_swap_lane_prepare(gs_swap_engine_t *e, CUcontext ctx);
/* The lane of ctx, created with ctx current (op held); NULL with err set
 * on failure. */
struct lane *gs_swap_lane_of(gs_swap_engine_t *e, CUcontext ctx, char *err, size_t errlen);

#endif
