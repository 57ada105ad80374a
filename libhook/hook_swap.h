/*
 * hook_swap.h - the swap tier inside the hook: which allocations are backed
 * with the virtual-memory API (so that they can leave the GPU and come back
 * at the same addresses), answering address queries for them as for plain
 * allocations, and carrying out the broker's swap_out / swap_in on a
 * thread of its own (libhook/swap/ does the work).
 *
 * On by default; GPUSHARE_SWAP=off keeps every allocation plain (the
 * broker then parks this process with the checkpoint API).  Legacy IPC
 * handles of backed memory are emulated (hook_ipc.h).  An allocation is backed
 * when the granularity (2 MiB) wastes at most an eighth of it: PyTorch's
 * and JAX's allocators ask for multiples of 2 MiB, so all of theirs are;
 * small one-off allocations stay plain, resident and counted
 * (bench/alloc_sizes.py measured what the frameworks ask for).
 */
#ifndef GS_HOOK_SWAP_H
#define GS_HOOK_SWAP_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "swap_engine.h"

/* The engine on the real driver (NULL without one): hook_ipc.c maps what
 * other processes share through it. */
gs_swap_engine_t *hook_swap_engine(void);
/* The real driver's functions the engine uses (hook_swap_thread.c maps
 * the broker's chunks with them); filled by the first hook_swap_engine. */
const gs_swap_driver_t *hook_swap_driver(void);
/* The tier's registry of ranges (NULL before the first hook_swap_engine,
 * or without a driver). */
gs_swap_ranges_t *hook_swap_ranges(void);

/* The tier is on in this process (GPUSHARE_SWAP=on and the driver has
 * what it needs); told to the broker in `join`. */
int hook_swap_available(void);
/* The unit it moves memory in (GPUSHARE_SWAP_SEGMENT, 256 MiB by default),
 * 0 without the tier; told to the broker in `join`, whose estimate of a
 * partial switch rounds to it. */
size_t hook_swap_segment_bytes(void);

/* cuMemAlloc's path: 1 when the swap tier served the call (its result in
 * *r), 0 when the caller allocates plainly. ctx is current, on GPU dev. */
int hook_swap_alloc(CUcontext ctx, int dev, size_t size, CUdeviceptr *dptr, CUresult *r);
/* cuMemFree's path: 1 when p was ours (result in *r). */
int hook_swap_free(CUdeviceptr p, CUresult *r);
/* The allocation holding p as the program sees it (start, requested size);
 * 1 when p lies in one of ours. */
int hook_swap_range(CUdeviceptr p, CUdeviceptr *base, size_t *size);
/* cuMemCreate made device memory on GPU dev: the tier tracks it, so that
 * it can move once mapped (hook_vmm_wrap.c), and *handle may be renamed
 * (swap_names.h). */
void hook_swap_vmm_created(CUmemGenericAllocationHandle *handle, size_t size, int dev);
/* The program enabled peer access: GPU accessor reaches owner's memory. */
void hook_swap_peer(int owner, int accessor);
/* A context is destroyed: what it allocated goes with it. */
void hook_swap_forget_ctx(CUcontext ctx);
/* In a forked child: CUDA does not survive fork, forget everything. */
void hook_swap_atfork_child(void);
/* Bytes backed (movable) resident and parked on GPU dev. */
void hook_swap_totals(int dev, uint64_t *resident, uint64_t *parked);

/* ---- the broker's commands ---------------------------------------------- */

/* What a command asks (hook_swap_command's `out`). */
enum { HOOK_SWAP_IN = 0, HOOK_SWAP_OUT = 1, HOOK_SWAP_DROP = 2 };

typedef struct {
    int dev;
    int out;        /* HOOK_SWAP_IN, _OUT or _DROP */
    uint64_t lease; /* the host memory lent for it */
    int ok;
    uint64_t bytes; /* moved */
    int64_t elapsed_us;
    uint64_t left_resident; /* device memory this process still holds there (not movable) */
    char error[200];
} hook_swap_report_t;

/* Called on the swap thread when a command is done. */
typedef void (*hook_swap_done_fn)(const hook_swap_report_t *report);

/* Queues a command for the swap thread (started on first use).  pool_path:
 * the broker's pool socket, for a swap out; wait_ms: how long a swap in
 * waits for memory the other side of a switch frees (0: the default);
 * bytes: a swap out moves about this much and leaves the rest on the GPU
 * (whole segments: a little more; 0: everything). */
void hook_swap_command(int dev, int out, uint64_t lease, unsigned wait_ms, uint64_t bytes,
                       const char *pool_path, hook_swap_done_fn done);
/* 1 while GPU dev has parked memory or a command under way. */
int hook_swap_parked(int dev);
/* 1 while GPU dev's memory comes back from host memory (a swap in under
 * way), with the bytes back so far and in all; 0 otherwise. */
int hook_swap_progress(int dev, uint64_t *done, uint64_t *total);
/* The broker is gone: bring every parked GPU back (the windows stay valid
 * without the broker), waiting for memory up to wait_ms each, on the swap
 * thread; recovered() runs there afterwards.  Queued once at a time. */
void hook_swap_recover(unsigned wait_ms, void (*recovered)(void));

#endif
