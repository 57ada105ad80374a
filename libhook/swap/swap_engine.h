/*
 * swap_engine.h - device memory that can leave the GPU and come back at
 * the same addresses, moved by this process' own copy engines at the
 * speed of the link (the swap tier of parking, doc/parking.md).
 *
 * A range's physical memory is made of segments (swap_ranges.h), and
 * moves go segment by segment: swapping out releases each segment once
 * its copy is complete, swapping in takes each segment as soon as the GPU
 * has room for it, so the two sides of a switch overlap.
 *
 * Allocation: the program's device allocations are backed with the
 * virtual-memory API (reserve an address range, create physical memory,
 * map it, grant access), which costs what cuMemAlloc costs (measured on
 * the H200: bench/swap_probe.c).  Swap out: every resident range of a GPU
 * is copied into a window of host memory (swap_window.h) on several
 * streams, and each range's physical memory is released as soon as its
 * copy is complete, so the GPU's memory comes free while the copy runs and
 * another process can already take it.  Swap in is the mirror: new
 * physical memory is mapped at the same addresses and the bytes are copied
 * back.  The caller guarantees that nothing of the program runs on the GPU
 * meanwhile (the hook's gate is closed and drained).
 *
 * Faults: a segment's host copy is complete before its device memory is
 * released, and its device copy is complete before it counts as resident
 * again; a failed step stops the operation with every segment either on
 * the GPU or in the window, its data intact, and the operation may be
 * retried (a range partly out counts as parked).
 */
#ifndef GS_SWAP_ENGINE_H
#define GS_SWAP_ENGINE_H

#include <stdint.h>

#include "swap_driver.h"
#include "swap_ranges.h"
#include "swap_window.h"

typedef struct gs_swap_engine gs_swap_engine_t;

typedef struct {
    int streams;        /* copies in flight per context (1..16) */
    size_t piece_bytes; /* one copy's size (64 MiB) */
    size_t batch_bytes; /* memory released or taken per batch of copies (256 MiB) */
    size_t seg_bytes;   /* physical memory of a range comes in segments of this size (256 MiB) */
} gs_swap_engine_config_t;

/* The unit of a move: the segment (GS_SWAP_SEGMENT_DEFAULT unless the
 * configuration says otherwise).  256 MiB: in a switch the incoming side
 * waits for the outgoing one to free memory segment by segment, so smaller
 * segments start it sooner (a 4 GiB switch on the H200: 0.097 s in with
 * 256 MiB against 0.125 s with 1 GiB; bench/results/eval-2026-12-04). */
#define GS_SWAP_SEGMENT_DEFAULT (256u << 20)

/* The table and the ranges outlive the engine. */
gs_swap_engine_t *gs_swap_engine_new(const gs_swap_driver_t *d, gs_swap_ranges_t *ranges,
                                     const gs_swap_engine_config_t *cfg);
void gs_swap_engine_destroy(gs_swap_engine_t **self_p);
/* The segment size in force (the broker is told it: a partial park moves
 * whole segments). */
size_t gs_swap_engine_segment_bytes(const gs_swap_engine_t *self);

/* ---- allocation ---------------------------------------------------------- */

/* What cuMemAlloc does, with VMM backing, in context ctx (current on the
 * calling thread) on GPU dev.  The driver's result. */
CUresult gs_swap_alloc(gs_swap_engine_t *self, CUcontext ctx, int dev, size_t size,
                       CUdeviceptr *va);
/* What cuMemFree does for a range of ours (the context's work is waited
 * for first, as cuMemFree does).  *ours = 0 when va is not one of ours
 * (then nothing was done). */
CUresult gs_swap_free(gs_swap_engine_t *self, CUdeviceptr va, int *ours);

/* The context is being destroyed: its ranges go with it, as cuMemAlloc
 * memory does (no waiting: the context's work is gone). */
void gs_swap_forget_ctx(gs_swap_engine_t *self, CUcontext ctx);

/* From now on GPU accessor may reach every range on GPU owner (the program
 * enabled peer access); applied to the ranges there now and to new ones. */
CUresult gs_swap_grant_peer(gs_swap_engine_t *self, int owner, int accessor);

/* ---- sharing with another process ------------------------------------------ */

/* Legacy IPC handles (cuIpcGetMemHandle, which torch.multiprocessing uses)
 * do not work on VMM memory, so the hook emulates them: the range is
 * exported as one descriptor per segment, passed to the other process, and
 * mapped there.  A shared range is pinned: it is never moved again (the
 * other process maps its physical memory), and counts as memory that
 * cannot move. */
typedef struct {
    CUdeviceptr base; /* in the exporting process */
    size_t size, bytes, seg_bytes;
    int nseg;
    int dev;
} gs_swap_shape_t;

/* The keys of the range holding p (its first, or `fresh`, then kept: one
 * allocation has one handle) and its base; 0, or -1 when p is not memory
 * of the tier.  A range freed takes its keys with it: a handle of it never
 * opens memory allocated later at the same address. */
int gs_swap_ipc_keys(gs_swap_engine_t *self, CUdeviceptr p, const gs_swap_ipc_keys_t *fresh,
                     gs_swap_ipc_keys_t *keys, CUdeviceptr *base);
/* The range that starts at base, if ask is its key: pinned and exported as
 * one descriptor per segment in fds (the caller closes them), its shape
 * and its proof; the count, or -1 with err (the same error for a wrong key
 * as for no such range: an asker learns nothing of what is there). */
int gs_swap_export(gs_swap_engine_t *self, CUdeviceptr base, const unsigned char *ask, int *fds,
                   int max, gs_swap_shape_t *shape, unsigned char *proof, char *err, size_t errlen);
/* Maps another process' exported range for GPU dev at a new address. */
CUresult gs_swap_import(gs_swap_engine_t *self, int dev, const gs_swap_shape_t *shape,
                        const int *fds, CUdeviceptr *va);
/* Unmaps what gs_swap_import mapped at va; *ours = 0 when va is not one. */
CUresult gs_swap_unimport(gs_swap_engine_t *self, CUdeviceptr va, int *ours);

/* ---- the program's own virtual memory ------------------------------------------ */

/* A program that maps memory it made itself (cuMemCreate + cuMemMap, as
 * PyTorch's expandable segments do) has it moved too: a handle mapped
 * once, whole, is adopted as a range of one segment (swap_ranges.h).  Its
 * handle is released when it goes out and made again when it comes back,
 * so the program's calls that name a handle are translated
 * (swap_names.h).  A handle exported, retained or mapped twice is fixed: it
 * never moves again.  The engine makes the driver call itself, under its
 * lock, so that no move runs in the middle of the program's call. */
typedef enum {
    GS_SWAP_VMM_PASS,   /* none of the tier's business: the caller calls the driver */
    GS_SWAP_VMM_DONE,   /* done here, the driver's result in *res */
    GS_SWAP_VMM_PARKED, /* the memory is parked on GPU *dev: bring it back, call again */
} gs_swap_vmm_t;

/* cuMemCreate made device memory on GPU dev as *handle: tracked from now,
 * and *handle becomes the name the program knows it by. */
void gs_swap_vmm_created(gs_swap_engine_t *self, CUmemGenericAllocationHandle *handle, size_t size,
                         int dev);
/* cuMemMap of a tracked handle, in context ctx (current; NULL: none). */
gs_swap_vmm_t gs_swap_vmm_map(gs_swap_engine_t *self, CUcontext ctx, CUdeviceptr va, size_t size,
                              size_t offset, CUmemGenericAllocationHandle name,
                              unsigned long long flags, CUresult *res, int *dev);
gs_swap_vmm_t gs_swap_vmm_unmap(gs_swap_engine_t *self, CUdeviceptr va, size_t size, CUresult *res,
                                int *dev);
gs_swap_vmm_t gs_swap_vmm_set_access(gs_swap_engine_t *self, CUdeviceptr va, size_t size,
                                     const CUmemAccessDesc *desc, size_t count, CUresult *res,
                                     int *dev);
gs_swap_vmm_t gs_swap_vmm_release(gs_swap_engine_t *self, CUmemGenericAllocationHandle name,
                                  CUresult *res, int *dev);
/* A call that passes a handle on (cuMemExportToShareableHandle with fix =
 * 1, cuMemGetAllocationPropertiesFromHandle with fix = 0): DONE with the
 * handle the driver knows now in *real, for the caller to pass. */
gs_swap_vmm_t gs_swap_vmm_handle(gs_swap_engine_t *self, CUmemGenericAllocationHandle name, int fix,
                                 CUmemGenericAllocationHandle *real, int *dev);
/* cuMemRetainAllocationHandle of an address in an adopted mapping: *out is
 * the program's name for it, and the mapping is fixed. */
gs_swap_vmm_t gs_swap_vmm_retain(gs_swap_engine_t *self, CUmemGenericAllocationHandle *out,
                                 CUdeviceptr addr, CUresult *res, int *dev);
/* A query of [va, va + size) (cuMemGetAccess): PARKED when some of the
 * program's mapped memory there is parked, else PASS. */
gs_swap_vmm_t gs_swap_vmm_touch(gs_swap_engine_t *self, CUdeviceptr va, size_t size, int *dev);

/* ---- moving ---------------------------------------------------------------- */

typedef struct {
    uint64_t bytes; /* moved */
    int ranges;     /* moved */
    int64_t elapsed_ns;
    char error[200]; /* set on failure */
} gs_swap_result_t;

/* Progress, called between batches from the calling thread. */
typedef void (*gs_swap_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* What a move asks of its caller between batches (any may be NULL). */
typedef struct {
    gs_swap_progress_fn progress;
    /* Swap out into a window not all mapped yet (mapped as the copies go,
     * and in a switch's relay as the chunks come): the next segment needs
     * the window mapped up to `upto` bytes; the caller maps more.  With
     * wait 0 it maps only what it has at hand and returns 1 if that is not
     * enough (the engine then finishes its batch in flight, which frees
     * GPU memory the other side of a switch may wait for, and asks again
     * with wait 1: the caller may wait for chunks).  0 when mapped, or -1
     * with err set: the move stops there, what went out stays out. */
    int (*more)(void *arg, gs_swap_window_t *w, uint64_t upto, int wait, char *err, size_t errlen);
    /* Swap in: these positions of the window hold nothing that is still
     * to come back (each is reported once); the caller may unmap them and
     * give their chunks back early, for the session going out. */
    void (*done)(void *arg, gs_swap_window_t *w, const int *positions, int n);
    void *arg;
} gs_swap_calls_t;

/* The move itself: out (1) or in (0), as gs_swap_out / gs_swap_in_until,
 * with the caller's calls.  Memory that the other side of a switch is
 * still giving back (GPU memory coming in, chunks going out) is waited
 * for with what is finished handed over first, so that neither side
 * holds what the other waits for.
 *
 * A partial swap out (limit > 0): it stops after the segment that brings
 * what went out to limit bytes, and the rest stays on the GPU (a partial
 * park: the session coming in needs only that much room).  Only the
 * ranges with a segment out take a place in the window.  A swap in
 * ignores limit: it brings back whatever is out. */
int gs_swap_move(gs_swap_engine_t *self, int dev, gs_swap_window_t *w, int out, uint64_t limit,
                 const int64_t *deadline, const gs_swap_calls_t *calls, gs_swap_result_t *res);

/* Moves every resident range of GPU dev into window w.  0, or -1 with
 * res->error (then some ranges may be parked, the rest resident). */
int gs_swap_out(gs_swap_engine_t *self, int dev, const gs_swap_window_t *w,
                gs_swap_progress_fn progress, void *arg, gs_swap_result_t *res);

/* Brings every parked range of GPU dev back from window w.  While the GPU
 * has no room (another process still frees it) it retries for up to
 * wait_ms.  0, or -1 with res->error (the ranges not back stay parked). */
int gs_swap_in(gs_swap_engine_t *self, int dev, const gs_swap_window_t *w, unsigned wait_ms,
               gs_swap_progress_fn progress, void *arg, gs_swap_result_t *res);
/* The same with a deadline (CLOCK_MONOTONIC ns, gs_swap_deadline) that
 * another thread may move while it waits (atomically): later when the
 * broker asks again, now when it wants the memory out instead. */
int gs_swap_in_until(gs_swap_engine_t *self, int dev, const gs_swap_window_t *w,
                     const int64_t *deadline, gs_swap_progress_fn progress, void *arg,
                     gs_swap_result_t *res);
/* The deadline wait_ms from now, on the clock gs_swap_in_until reads. */
int64_t gs_swap_deadline(unsigned wait_ms);

#endif
